package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// waitTimeout bounds every wait in these tests. It is a liveness bound (a
// test that hangs fails), not a timing assertion.
const waitTimeout = 60 * time.Second

func submit(t *testing.T, f *fleettest.Fleet, a *bus.Attempt) *client.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := f.Client.Submit(ctx, a)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if h.Reply.Status != bus.StatusAccepted {
		t.Fatalf("submit: %+v, want accepted", h.Reply)
	}
	t.Cleanup(h.Close)
	return h
}

func result(t *testing.T, h *client.Handle) *bus.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	r, err := h.Result(ctx)
	if err != nil {
		t.Fatalf("result of %s: %v", h.AttemptID(), err)
	}
	return r
}

// waitEvent waits for the first event of type typ on h.
func waitEvent(t *testing.T, h *client.Handle, typ string) bus.Event {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-h.Events():
			if !ok {
				t.Fatalf("events ended before a %s event", typ)
			}
			if e.Type == typ {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event", typ)
		}
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
