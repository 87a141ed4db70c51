package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
)

// A worker whose lease renewals fail because Redis is stopped under it stops
// the run (its context is cancelled with lease_lost) and commits nothing;
// the attempt ends with exactly one result, lease_lost or worker_lost.
func TestRedisStoppedUnderRunningWorker(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	h := submit(t, f, fleettest.Attempt("sess-redis", fleettest.Script(`{"say":"before"}`, `{"sleep":60000}`, `{"say":"after"}`)))
	waitLedger(t, f, h.AttemptID(), scripted.EventStart)
	if err := f.Redis.Stop(); err != nil {
		t.Fatal(err)
	}
	// The run self-fences while Redis is down: its harness returns.
	waitLedger(t, f, h.AttemptID(), scripted.EventEnd)
	if err := f.Redis.Start(); err != nil { // empty: no persistence
		t.Fatal(err)
	}
	r := result(t, h)
	if r.Error == nil || (r.Error.Code != teamster.CodeLeaseLost && r.Error.Code != teamster.CodeWorkerLost) || r.Error.SideEffects != teamster.SideEffectsPossible {
		t.Fatalf("result %+v, want lease_lost or worker_lost", r)
	}
	durable, err := f.Client.Result(t.Context(), h.AttemptID())
	if err != nil || durable.Error == nil || durable.Error.Code != r.Error.Code {
		t.Fatalf("durable result %+v (%v)", durable, err)
	}
	// Nothing was committed: no session record (a committed turn writes one).
	if _, err := leases.NewStore(f.RDB).Session(t.Context(), "sess-redis"); err == nil {
		t.Fatal("a session record was written by a worker without its lease")
	}
	// The fleet goes on: the session's next turn runs.
	next := submit(t, f, fleettest.Attempt("sess-redis", "next"))
	if r := result(t, next); r.Status != teamster.StatusOK {
		t.Fatalf("next turn %+v", r)
	}
}

// Redis paused (SIGSTOP) past the lease TTL, data kept: the worker self-fences
// and its run ends; the attempt ends with exactly one of lease_lost (the
// worker recorded it first) or worker_lost (the fleet did).
func TestRedisPausedPastTheLeaseTTL(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	h := submit(t, f, fleettest.Attempt("sess-pause", fleettest.Script(`{"sleep":60000}`)))
	waitLedger(t, f, h.AttemptID(), scripted.EventStart)
	if err := f.Redis.Pause(); err != nil {
		t.Fatal(err)
	}
	waitLedger(t, f, h.AttemptID(), scripted.EventEnd)
	time.Sleep(f.Opts.LeaseTTL) // let the lease's TTL run out in the paused server
	if err := f.Redis.Resume(); err != nil {
		t.Fatal(err)
	}
	r := result(t, h)
	if r.Error == nil || (r.Error.Code != teamster.CodeLeaseLost && r.Error.Code != teamster.CodeWorkerLost) {
		t.Fatalf("result %+v, want lease_lost or worker_lost", r)
	}
	a, err := leases.NewStore(f.RDB).Attempt(t.Context(), "sess-pause", h.AttemptID())
	if err != nil || a.Outcome != string(r.Error.Code) {
		t.Fatalf("recorded outcome %+v (%v), want %s", a, err, r.Error.Code)
	}
	if _, err := leases.NewStore(f.RDB).Session(t.Context(), "sess-pause"); err == nil {
		t.Fatal("a session record was written by a worker without its lease")
	}
}

// The result is durable: after the submitting client has gone, another
// connection reads it.
func TestResultOutlivesItsSubmitter(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	nc := f.Connect("short-lived")
	c := fleettestClient(t, nc)
	h, err := c.Submit(t.Context(), fleettest.Attempt("sess-durable", fleettest.Script(`{"sleep":300}`, `{"say":"kept"}`)))
	if err != nil {
		t.Fatal(err)
	}
	id := h.AttemptID()
	nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	r, err := f.Client.WaitResult(ctx, id)
	if err != nil || r.Status != teamster.StatusOK || r.AssistantTexts[0] != "kept" {
		t.Fatalf("durable result %+v (%v)", r, err)
	}
}

// waitLedger waits until the scripted harness recorded event for attempt.
func waitLedger(t *testing.T, f *fleettest.Fleet, attempt, event string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		for _, e := range f.Ledger.Entries() {
			if e.Attempt == attempt && e.Event == event {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s of the run of %s", event, attempt)
}

// A NATS server restart (JetStream store kept) neither empties the router's
// view of the registry (no fallback replies while workers live) nor loses
// or replays a queued attempt.
func TestNATSRestartKeepsServing(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	queued := submit(t, f, fleettest.Attempt("nats:q", fleettest.Script(`{"sleep":1500}`, `{"say":"first"}`)))
	behind := submit(t, f, fleettest.Attempt("nats:q", "second"))
	if err := f.NATS.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(12 * time.Second) // past the registry TTL and the watch's own recovery
	n := 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := f.Client.Submit(ctx, fleettest.Attempt(fmt.Sprintf("nats:probe-%d", n), "probe"))
		cancel()
		n++
		if err != nil {
			continue // the client reconnects; a submit may fail meanwhile
		}
		if h.Reply.Status == bus.StatusFallback {
			t.Fatalf("the router answered fallback %s after the restart: its registry view was empty", time.Until(deadline))
		}
		if r := result(t, h); r.Status != teamster.StatusOK {
			t.Fatalf("probe after the restart: %+v", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, h := range []*client.Handle{queued, behind} {
		if r := result(t, h); r.Status != teamster.StatusOK && (r.Error == nil || r.Error.Code != teamster.CodeWorkerLost) {
			t.Fatalf("attempt across the restart: %+v", r)
		}
	}
	if err := scripted.CheckReplays(f.Ledger.Entries()); err != nil {
		t.Fatal(err)
	}
}
