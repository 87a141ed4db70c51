package e2e

import (
	"encoding/json"
	"testing"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// waitTimeout bounds every wait in these tests. It is a liveness bound (a
// test that hangs fails), not a timing assertion.
const waitTimeout = fleettest.WaitTimeout

func submit(t *testing.T, f *fleettest.Fleet, a *bus.Attempt) *client.Handle {
	t.Helper()
	return fleettest.Submit(t, f.Client, a)
}

func result(t *testing.T, h *client.Handle) *bus.Result {
	t.Helper()
	return fleettest.Result(t, h)
}

// waitEvent waits for the first event of type typ on h.
func waitEvent(t *testing.T, h *client.Handle, typ string) bus.Event {
	t.Helper()
	return fleettest.WaitEvent(t, h, typ)
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
