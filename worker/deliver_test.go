package worker

import (
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/backendtest"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/leases"
)

// Exactly one terminal result, on the event channel too: a worker delivers
// its recorded outcome durably, marks it published and only then sends the
// result event, and sends none when a reaper marked the outcome first (the
// worker was slower than the reaper's grace, and the reaper sent it).
func TestDeliverSendsTheResultEventOnlyAsFirstMarker(t *testing.T) {
	b := backendtest.Start(t)
	ctx := t.Context()
	keep := leases.NewKeeper(leases.KeeperParams{Store: b.Store, Holder: "w1", TTL: 10 * time.Second, Logger: b.Log, NewEpochQuarantine: -1})
	t.Cleanup(keep.Stop)
	w := &Worker{nc: b.NC, js: b.JS, store: b.Store, keep: keep, log: b.Log, m: metrics.NewWorker(nil)}
	events := b.ResultEvents(t, "_INBOX.delivertest")

	// finished claims and finishes an attempt of its own session and returns
	// its run, ready to deliver, and the result's bytes.
	finished := func(id string) (*run, []byte) {
		t.Helper()
		session, replyTo := "s-"+id, "_INBOX.delivertest."+id
		if _, err := b.Store.Accept(ctx, leases.AcceptArgs{SessionKey: session, AttemptID: id, HarnessID: "codex",
			ReplyTo: replyTo, QueueTimeout: time.Minute, RunBudget: time.Minute, Reply: []byte(`{"v":1}`)}); err != nil {
			t.Fatal(err)
		}
		l, res, err := keep.Claim(ctx, session, id, "codex")
		if err != nil || res.Status != leases.Claimed {
			t.Fatalf("claim %s: %v %+v", id, err, res)
		}
		body, err := bus.Encode(&bus.Result{V: bus.Version, AttemptID: id, Status: teamster.StatusOK, HarnessID: "codex",
			WorkerID: "w1", Fence: l.Fence(), AssistantTexts: []string{"hi"}})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := l.Finish(ctx, leases.Outcome{Code: leases.OutcomeOK, Result: body}); err != nil || st != leases.Finished {
			t.Fatalf("finish %s: %s %v", id, st, err)
		}
		a := &bus.Attempt{V: bus.Version, AttemptID: id, SessionKey: session, ReplyTo: replyTo}
		return &run{w: w, attempt: a, harnessID: "codex", lease: l, started: time.Now()}, body
	}

	r, body := finished("a1")
	r.deliver(ctx, recording{kind: recorded, body: body, status: teamster.StatusOK})
	// A reaper republished the second outcome and marked it (and sent its
	// event) before this worker got to its mark.
	r2, body2 := finished("a2")
	if err := bus.PublishResultBody(ctx, b.JS, "a2", body2); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Store.MarkPublished(ctx, "s-a2", "a2", leases.MarkerToken()); err != nil || m != leases.MarkedNow {
		t.Fatalf("the reaper's mark: %v %v", m, err)
	}
	r2.deliver(ctx, recording{kind: recorded, body: body2, status: teamster.StatusOK})
	// The worker's mark ran in Redis but its reply was lost: the retry, with
	// the same fence, is answered as the worker's mark, and it sends.
	r3, body3 := finished("a3")
	lost := b.LoseNextMarkReply()
	r3.deliver(ctx, recording{kind: recorded, body: body3, status: teamster.StatusOK})
	if !lost() {
		t.Fatal("no mark published reply was lost; the a3 case tested nothing")
	}

	if got := events(); got["a1"] != 1 || got["a2"] != 0 || got["a3"] != 1 {
		t.Fatalf("the worker's result events %v, want a1 once (it marked first), a2 none (a reaper did), a3 once (its retried mark)", got)
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		got, err := bus.GetResult(ctx, b.JS, id)
		if err != nil || got.AttemptID != id || got.Status != teamster.StatusOK {
			t.Fatalf("durable result of %s: %+v %v", id, got, err)
		}
	}
}
