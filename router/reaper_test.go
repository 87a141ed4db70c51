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
	b, rp, events := startReaper(t)
	ctx := t.Context()

	e, both := expired(t, b, "a1")
	for _, r := range both {
		rp.publish(ctx, b.Log, e, r, leases.MarkerToken())
	}
	// A worker's outcome marked by the worker (which sent its event) before
	// the reaper's publish got to its mark.
	e2, both2 := expired(t, b, "a2")
	if m, err := b.Store.MarkPublished(ctx, "s-a2", "a2", "worker-fence"); err != nil || m != leases.MarkedNow {
		t.Fatalf("worker mark: %v %v", m, err)
	}
	rp.publish(ctx, b.Log, e2, both2[0], leases.MarkerToken())

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

// startReaper starts the backends and a reaper on them (which does not sweep
// by itself), and counts the result events sent under _INBOX.reapertest.
func startReaper(t *testing.T) (*backendtest.Backends, *reaper, func() map[string]int) {
	t.Helper()
	b := backendtest.Start(t)
	rp := newReaper(reaperParams{store: b.Store, js: b.JS, nc: b.NC, interval: time.Hour, log: b.Log, m: metrics.NewRouter(nil)})
	return b, rp, b.ResultEvents(t, "_INBOX.reapertest")
}

// expired accepts an attempt with a 1 ms queue timeout, waits past it, and
// has two reapers decide its queue_timeout before either publishes.
func expired(t *testing.T, b *backendtest.Backends, id string) (leases.DueEntry, [2]leases.Reaped) {
	t.Helper()
	ctx := t.Context()
	if _, err := b.Store.Accept(ctx, leases.AcceptArgs{SessionKey: "s-" + id, AttemptID: id, HarnessID: "codex",
		ReplyTo: "_INBOX.reapertest." + id, QueueTimeout: time.Millisecond, RunBudget: time.Minute, Reply: []byte(`{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	e := leases.DueEntry{Tag: leases.Tag("s-" + id), AttemptID: id}
	var got [2]leases.Reaped
	for i := range got {
		r, err := b.Store.Reap(ctx, e, publishGrace, leases.MarkerToken())
		if err != nil || r.Action != leases.ReapPublish || r.Outcome != string(teamster.CodeQueueTimeout) {
			t.Fatalf("reap %d of %s: %+v %v, want publish queue_timeout", i, id, r, err)
		}
		got[i] = r
	}
	return e, got
}

// A reaper whose mark was made in Redis but whose reply was lost (a
// connection cut after the command ran) tries the mark again with the same
// token, which Redis answers as this reaper's: it sends the result event,
// once. Before, the lost reply left the attempt without a result event.
func TestReaperMarkWithALostReplyStillSends(t *testing.T) {
	b, rp, events := startReaper(t)
	ctx := t.Context()

	e, both := expired(t, b, "a3")
	lost := b.LoseNextMarkReply()
	rp.publish(ctx, b.Log, e, both[0], leases.MarkerToken())

	if !lost() {
		t.Fatal("no mark published reply was lost; the test did not test anything")
	}
	if got := events(); got["a3"] != 1 {
		t.Fatalf("result events %v, want a3 once", got)
	}
	if rec, err := b.Store.Attempt(ctx, "s-a3", "a3"); err != nil || !rec.Published {
		t.Fatalf("record of a3: %+v %v, want published", rec, err)
	}
	// A second reaper that publishes the same outcome finds it marked by
	// the first and sends nothing.
	rp.publish(ctx, b.Log, e, both[1], leases.MarkerToken())
	if got := events(); got["a3"] != 0 {
		t.Fatalf("result events after a second reaper %v, want none", got)
	}
}

// A mark that its marker never confirmed sending (it died between its mark
// and the result event) is taken over by a reaper once its send window has
// passed: the reaper sends the durable result as the result event, once,
// and confirms it; a later reaper owes nothing.
func TestReaperSendsTheResultEventOfAnUnconfirmedMark(t *testing.T) {
	b, rp, events := startReaper(t)
	ctx := t.Context()
	e, both := expired(t, b, "a4")
	body, err := fleetResult("a4", both[0])
	if err != nil {
		t.Fatal(err)
	}
	// A marker (another reaper, say) published and marked the outcome and
	// died before sending its event.
	if err := bus.PublishResultBody(ctx, b.JS, "a4", body); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Store.MarkPublished(ctx, "s-a4", "a4", "dead-marker"); err != nil || m != leases.MarkedNow {
		t.Fatalf("mark: %v %v", m, err)
	}
	rp.reap(ctx, e) // within the send window: nothing yet
	if got := events(); got["a4"] != 0 {
		t.Fatalf("result events within the send window %v, want none", got)
	}
	b.AgeMark(t, "s-a4", "a4", leases.SendWindow+time.Second)
	rp.reap(ctx, e)
	if got := events(); got["a4"] != 1 {
		t.Fatalf("result events after the send window %v, want a4 once", got)
	}
	if rec, err := b.Store.Attempt(ctx, "s-a4", "a4"); err != nil || !rec.Sent {
		t.Fatalf("record of a4: %+v %v, want sent", rec, err)
	}
	rp.reap(ctx, e)
	if got := events(); got["a4"] != 0 {
		t.Fatalf("result events after the reaper confirmed %v, want none", got)
	}
}
