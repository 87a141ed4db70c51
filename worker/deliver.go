package worker

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/retry"
	"github.com/teamster-fleet/teamster/leases"
)

// Phase 5 of a run, the delivery: what the fenced finish recorded goes to
// the results stream (publish), is marked published in Redis (mark), and
// only then goes to the submitter as the result event (send), as
// docs/PROTOCOL.md orders it; the sender then tells the fleet it sent it
// (confirm). Its last step, conclude, counts the run and closes its event
// stream. The retry budgets are in finish.go.

// deliver delivers rec. A recorded outcome is sent to the submitter only when
// this worker's mark was the first: a reaper that republished the outcome
// meanwhile (this worker took longer than the reaper's grace, say through a
// NATS outage) has sent the result event itself, and a submitter gets it
// once. The mark opens the worker's send window (leases.SendWindow): it
// sends the event within it and confirms it, and a mark it never confirms
// (it died or stalled between the mark and the event) is taken over by a
// reaper, which sends the event. If the durable publish never succeeds, or
// the mark never gets through, the reaper republishes the outcome from the
// record and sends it.
func (r *run) deliver(ctx context.Context, rec recording) {
	switch rec.kind {
	case dropped:
		return
	case givenUp:
		r.conclude(nil, rec.status, false)
		return
	}
	r.advance(stepDeliver)
	if !r.publish(ctx, rec.body) {
		return
	}
	if rec.kind == unrecorded {
		// No record: no reaper will send it, and there is nothing to mark.
		r.conclude(rec.body, rec.status, true)
		return
	}
	var marked leases.Marked
	var markSent time.Time
	err := retry.For(ctx, markBudget, func() error {
		var merr error
		markSent = time.Now()
		// The claim's fence is this run's marker token: no other run has it.
		marked, merr = r.w.store.MarkPublished(ctx, r.attempt.ScopedSessionKey(), r.attempt.ScopedID(), r.lease.Fence())
		return merr
	})
	if h := r.w.hooks.Load(); h != nil && h.afterMark != nil {
		h.afterMark(r.attempt.AttemptID)
	}
	switch {
	case err != nil:
		r.log().Warn("result not marked published; the reaper publishes it again and sends the result event: " + err.Error())
		r.conclude(rec.body, rec.status, false)
	case marked == leases.MarkedBefore:
		r.log().Info("a reaper published the result first and sent the result event")
		r.conclude(rec.body, rec.status, false)
	case marked == leases.MarkedGone:
		// No record: no reaper will send it, and there is nothing to confirm.
		r.conclude(rec.body, rec.status, true)
	case time.Now().After(leases.SendBy(markSent)):
		// Held up (a pause) past the mark's send-by time: a reaper takes the
		// mark over and sends the event; sending it too would send it twice.
		r.log().Warn("too late to send the result event under the mark; a reaper sends it")
		r.conclude(rec.body, rec.status, false)
	default:
		if r.conclude(rec.body, rec.status, true) {
			r.confirm(ctx)
		}
	}
}

// publish stores the result on its results subject, retrying for
// publishBudget; it reports whether body is the attempt's durable result.
func (r *run) publish(ctx context.Context, body []byte) bool {
	err := retry.For(ctx, publishBudget, func() error {
		err := bus.PublishResultBody(ctx, r.w.js, r.attempt.ScopedID(), body)
		if errors.Is(err, bus.ErrResultExists) {
			return backoff.Permanent(err)
		}
		return err
	})
	switch {
	case errors.Is(err, bus.ErrResultExists):
		r.log().Warn("another result was published first; this one is dropped")
	case err != nil:
		r.log().Error("durable result not published: " + err.Error())
	}
	return err == nil
}

// confirm tells the fleet that this worker sent the result event, so that
// no reaper sends it again. One that never gets through leaves the mark to a
// reaper, and the submitter may get the event twice (clients keep the
// first).
func (r *run) confirm(ctx context.Context) {
	err := retry.For(ctx, markBudget, func() error {
		_, err := r.w.store.ConfirmSent(ctx, r.attempt.ScopedSessionKey(), r.attempt.ScopedID(), r.lease.Fence())
		return err
	})
	if err != nil {
		r.log().Warn("the result event's sending not confirmed; a reaper sends it again: " + err.Error())
	}
}

// conclude is a delivery's last step: it counts the run as finished by this
// worker with status and closes the run's event stream (dropping its
// subjects), with the result event as its last event when send is set. It
// reports whether it sent the event (a nil body counts and sends nothing).
func (r *run) conclude(body []byte, status teamster.Status, send bool) bool {
	took := time.Since(r.started)
	r.w.m.Finished.WithLabelValues(r.harnessID, string(status)).Inc()
	r.w.m.RunDuration.WithLabelValues(r.harnessID).Observe(took.Seconds())
	if !send {
		body = nil
	}
	sent := r.closeEvents(body)
	if r.w.steps.Enabled() {
		r.w.steps.Log(r.log().WithFields(logrus.Fields{"status": status, "took": took.Round(time.Millisecond), "event_sent": sent}), "delivered")
	}
	return sent
}

// deliverOrphan answers an attempt that cannot be run and has no record
// (the claim found none): its result is published and sent directly, with
// no run, no mark and no retry; the stream alone decides which result
// stands.
func (w *Worker) deliverOrphan(ctx context.Context, a *bus.Attempt, harnessID string, e *teamster.Error) {
	res := bus.NewErrorResult(a.AttemptID, e)
	res.HarnessID, res.WorkerID = harnessID, w.id
	body, err := bus.Encode(res)
	if err != nil {
		return
	}
	if err := bus.PublishResultBody(ctx, w.js, a.ScopedID(), body); err != nil {
		return
	}
	if a.ReplyTo != "" {
		_ = bus.SendEvent(w.nc, a.ReplyTo, &bus.Event{V: bus.Version, AttemptID: a.AttemptID, Seq: 1, Type: bus.EventResult, Data: body})
	}
}
