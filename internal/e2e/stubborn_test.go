package e2e

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// stubborn is a harness that ignores its context: it returns only when the
// test lets it.
type stubborn struct {
	m       selection.Manifest
	release chan struct{}
	started chan struct{}
}

func (s *stubborn) Manifest() selection.Manifest { return s.m }
func (s *stubborn) Supports(a *bus.Attempt) (bool, string) {
	return harness.SupportsManifest(s.m, a)
}
func (s *stubborn) RunAttempt(context.Context, *harness.Run) (*harness.Outcome, error) {
	s.started <- struct{}{}
	<-s.release
	return &harness.Outcome{AssistantTexts: []string{"too late"}}, nil
}

var theStubborn = &stubborn{release: make(chan struct{}), started: make(chan struct{}, 1)}

func init() {
	worker.RegisterImplementation("stubborn", func(m selection.Manifest, _ json.RawMessage, _ worker.FactoryEnv) (harness.Harness, error) {
		theStubborn.m = m
		return theStubborn, nil
	})
}

// A harness that ignores cancellation does not hold the attempt hostage:
// after its grace (settlementTimeoutMs) the attempt ends with the cause (one result,
// lease released), and the harness's late return changes nothing.
func TestHarnessIgnoringCancellationIsLeftBehind(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1, WorkerConfig: func(id string, slots int) *worker.Config {
		cfg := worker.DevConfig(id, slots)
		cfg.Harnesses = []worker.HarnessConfig{{Implementation: "stubborn", Manifest: selection.Manifest{ID: "codex", PluginID: "codex"}}}
		return cfg
	}})
	a := fleettest.Attempt("stubborn:1", "hello")
	a.TimeoutMs = 200
	zero := int64(200)
	a.SettlementTimeoutMs = &zero
	h := submit(t, f, a)
	<-theStubborn.started
	r := result(t, h)
	if r.Status != teamster.StatusTimeout || r.Error.Code != teamster.CodeDeadlineExceeded {
		t.Fatalf("result %+v, want deadline_exceeded", r)
	}
	if _, err := leases.NewStore(f.RDB).LeaseOf(t.Context(), "stubborn:1"); err == nil {
		t.Fatal("the lease is still held after the attempt ended")
	}
	close(theStubborn.release) // the harness finally returns; nothing more is published
	durable, err := f.Client.Result(t.Context(), h.AttemptID())
	if err != nil || durable.Error == nil || durable.Error.Code != teamster.CodeDeadlineExceeded {
		t.Fatalf("durable result %+v (%v)", durable, err)
	}
}
