package router

import (
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/backendtest"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/leases"
)

// Exactly one terminal result, on the event channel too: two reapers that
// both decided an attempt's queue_timeout (each read the record before
// either marked it) both publish it, and only the first to mark it sends the
// result event; a reaper that finds the outcome marked by its worker sends
// none.
func TestReapersSendTheResultEventOnce(t *testing.T) {
	b := backendtest.Start(t)
	ctx := t.Context()
	rp := newReaper(reaperParams{store: b.Store, js: b.JS, nc: b.NC, interval: time.Hour, log: b.Log, m: metrics.NewRouter(nil)})
	events := b.ResultEvents(t, "_INBOX.reapertest")

	// expired accepts an attempt with a 1 ms queue timeout, waits past it,
	// and has two reapers decide its queue_timeout before either publishes.
	expired := func(id string) (leases.DueEntry, [2]leases.Reaped) {
		t.Helper()
		if _, err := b.Store.Accept(ctx, leases.AcceptArgs{SessionKey: "s-" + id, AttemptID: id, HarnessID: "codex",
			ReplyTo: "_INBOX.reapertest." + id, QueueTimeout: time.Millisecond, RunBudget: time.Minute, Reply: []byte(`{"v":1}`)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		e := leases.DueEntry{Tag: leases.Tag("s-" + id), AttemptID: id}
		var got [2]leases.Reaped
		for i := range got {
			r, err := b.Store.Reap(ctx, e, publishGrace)
			if err != nil || r.Action != leases.ReapPublish || r.Outcome != string(teamster.CodeQueueTimeout) {
				t.Fatalf("reap %d of %s: %+v %v, want publish queue_timeout", i, id, r, err)
			}
			got[i] = r
		}
		return e, got
	}

	e, both := expired("a1")
	for _, r := range both {
		rp.publish(ctx, b.Log, e, r)
	}
	// A worker's outcome marked by the worker (which sent its event) before
	// the reaper's publish got to its mark.
	e2, both2 := expired("a2")
	if m, err := b.Store.MarkPublished(ctx, "s-a2", "a2", "worker-fence"); err != nil || m != leases.MarkedNow {
		t.Fatalf("worker mark: %v %v", m, err)
	}
	rp.publish(ctx, b.Log, e2, both2[0])

	if got := events(); got["a1"] != 1 || got["a2"] != 0 {
		t.Fatalf("result events %v, want a1 once (two reapers), a2 none (its worker marked first)", got)
	}
	for _, id := range []string{"a1", "a2"} {
		r, err := bus.GetResult(ctx, b.JS, id)
		if err != nil || r.Error == nil || r.Error.Code != teamster.CodeQueueTimeout {
			t.Fatalf("durable result of %s: %+v %v, want queue_timeout", id, r, err)
		}
		if rec, err := b.Store.Attempt(ctx, "s-"+id, id); err != nil || !rec.Published {
			t.Fatalf("record of %s: %+v %v, want published", id, rec, err)
		}
	}
}
