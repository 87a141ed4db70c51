package worker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/leases"
)

// Phase 1 of a run, the claim: a fetched attempt is claimed under its
// session's lease (leases.Keeper.Claim), and the claim is final once the
// message is acknowledged. Once fetch.go hands it a message, this phase
// owns it: ACK, NAK or TERM, and the slot the message came with.

const (
	// nakBase and nakCap bound the delay before a busy attempt is offered
	// again (nakDelay).
	nakBase = 20 * time.Millisecond
	nakCap  = 500 * time.Millisecond
	// claimTimeout bounds one claim, and the orphan delivery after it.
	claimTimeout = 10 * time.Second
)

// nakDelay is the delay before a busy attempt is offered again: exponential
// in its delivery count, capped at 500 ms, with jitter so that many waiting
// attempts do not return in lockstep.
func nakDelay(delivered uint64) time.Duration {
	d := nakBase
	for i := uint64(1); i < delivered && d < nakCap; i++ {
		d *= 2
	}
	d = min(d, nakCap)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// blockerCheckAfter is how many deliveries of a busy attempt pass before
// the worker asks whether the queued attempt ahead of it has already
// finished: a few seconds of waiting behind it (nakDelay doubles up to
// nakCap). A queued head is normally claimed at once, so this is rare; a
// running one is never asked about.
const blockerCheckAfter = 8

// adoptBlockerResult makes the record of the attempt that blocks a's
// session agree with its durable result, when it has one. After a Redis
// failover that lost a finished attempt's outcome (and perhaps its claim),
// the promoted primary may still hold it as accepted or claimed at the head
// of its session's order: its message was acknowledged long ago, so no
// claim will ever end it, and the session's later turns would wait for its
// queue deadline. The results stream keeps the attempt's one outcome
// (docs/ARCHITECTURE.md, "Outcomes"); once it is in the record, the next
// claim walks past it.
func (w *Worker) adoptBlockerResult(ctx context.Context, a *bus.Attempt, blocker string, log func() logrus.FieldLogger) {
	r, err := bus.GetResult(ctx, w.js, blocker)
	if err != nil {
		return // none (it is running or queued), or the stream did not answer: wait
	}
	changed, err := w.store.Adopt(ctx, leases.Tag(a.ScopedSessionKey()), blocker, r.Outcome())
	if err != nil {
		log().Warn("the attempt ahead has a durable result, but its record could not be updated: " + err.Error())
		return
	}
	if changed {
		log().WithFields(logrus.Fields{"blocker": blocker, "outcome": r.Outcome()}).
			Warn("the attempt ahead had finished (its durable result exists) but its record said otherwise (writes lost in a Redis failover); the record now agrees")
	}
}

// claim is the first phase of a run: it claims one fetched message's attempt
// under the session lease and, when the claim is final, starts the run. It
// holds one slot, which it passes to the run when the claim succeeds and
// releases otherwise. Every other claim status is answered here: NAKed for
// later (busy), ACKed (done, expired, foreign, missing), or given back (a
// lease that was no longer current when the claim's reply came).
func (w *Worker) claim(msg jetstream.Msg, harnessID string, h *hosted) {
	started := false
	defer func() {
		if !started {
			w.releaseSlot()
		}
	}()
	a, err := bus.DecodeAttempt(msg.Data())
	if err != nil || a.AttemptID == "" {
		// Only routers publish here; a body that does not decode is a bug
		// upstream. Drop it so it cannot block the consumer.
		w.log.WithField("harness", harnessID).Error("dropping an undecodable attempt message: " + errString(err, "no attemptId"))
		_ = msg.Term()
		return
	}
	// Fields built only when something is logged (a claim logs nothing).
	log := func() logrus.FieldLogger { return w.attemptLog(a, harnessID) }
	if a.ReplyTo != "" && !bus.ReplyToAllowed(a.Tenant, a.ReplyTo) {
		// The routers refuse such a submit; the worker never publishes
		// outside the submitter's inbox all the same.
		log().Warn("the attempt's replyTo is outside its tenant's inbox; its events are not sent")
		a.ReplyTo = ""
	}
	ctx, cancel := context.WithTimeout(w.runCtx, claimTimeout)
	defer cancel()
	lease, res, err := w.keep.Claim(ctx, a.ScopedSessionKey(), a.ScopedID(), harnessID)
	if err != nil {
		log().Warn("claim failed; the attempt will be offered again: " + err.Error())
		_ = msg.NakWithDelay(nakCap)
		return
	}
	switch res.Status {
	case leases.ClaimBusy:
		var delivered uint64 = 1
		if md, err := msg.Metadata(); err == nil {
			delivered = md.NumDelivered
		}
		// Only a queued head can be a finished attempt whose record a
		// failover rolled back: a running one holds its lease and ends it.
		if delivered >= blockerCheckAfter && res.BlockerState == leases.StateAccepted {
			w.adoptBlockerResult(ctx, a, res.Blocker, log)
		}
		d := nakDelay(delivered)
		if res.Wait > d {
			// The quarantine after a Redis data loss: come back when it
			// ends, checking at least every second.
			d = min(res.Wait, time.Second)
		}
		_ = msg.NakWithDelay(d)
	case leases.ClaimDone, leases.ClaimExpired:
		// Claimed before (a redelivery) or finished; an expired attempt's
		// queue_timeout is recorded. The reapers publish what is due (the
		// claim pointed them at it).
		_ = msg.Ack()
	case leases.ClaimForeign:
		// Not the attempt that was accepted: routers publish an attempt
		// only to the harness it was accepted for, so this message is a
		// stray (a router of another version, or a bug). The accepted
		// attempt's own message runs it; this one is dropped.
		_ = msg.Ack()
		log().WithField("accepted_for", res.State).Error("dropping a message of an attempt accepted for another harness")
	case leases.ClaimMissing:
		_ = msg.Ack()
		log().Error("no record of the attempt (Redis lost its data, or the router withdrew it): answering internal")
		w.deliverOrphan(ctx, a, harnessID, teamster.Errorf(teamster.CodeInternal,
			"the fleet has no record of this attempt (Redis lost its data); it was not run").WithSideEffects(teamster.SideEffectsNone))
	case leases.Claimed:
		if !lease.Current() {
			// The claim's reply came too late (a partition, a pause): the
			// lease may be gone already. Nothing acted on it, so give the
			// attempt back for another claim instead of running it.
			given, err := lease.Unclaim(ctx)
			log().WithField("given_back", given).Warn("claimed with a lease that was no longer current; not running it")
			if err == nil && given {
				_ = msg.Nak()
			} else {
				_ = msg.Ack() // the fleet recorded an outcome; the reaper publishes it
			}
			return
		}
		w.m.Claimed.WithLabelValues(harnessID).Inc()
		if !res.Accepted.IsZero() {
			w.m.ClaimWait.WithLabelValues(harnessID).Observe(res.ClaimedAt.Sub(res.Accepted).Seconds())
		}
		// The claim is final: acknowledge before running, so the message is
		// never delivered again. A lost ack only causes a redelivery that
		// the claim script answers "done".
		_ = msg.Ack()
		delegate := msg.Headers().Get(bus.HeaderDelegate)
		r := w.newRun(a, harnessID, h, lease, delegate)
		r.session = res.Session
		if w.steps.Enabled() {
			l := r.log()
			if delegate != "" {
				l = l.WithField("delegate", delegate)
			}
			w.steps.Log(l, "claimed")
		}
		started = true
		r.execute()
	}
}

func errString(err error, fallback string) string {
	if err != nil {
		return err.Error()
	}
	return fallback
}
