package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/leases"
)

// Fetching: a poller never fetches without a free slot (Temporal's slot
// supplier idea). It takes one slot and then any others free at that moment,
// up to maxBatch; with several it asks for whatever is waiting without
// waiting; with one (or when nothing was waiting) it long-polls for one
// message. Unused slots go back at once.
const (
	maxBatch     = 32
	longPoll     = time.Second
	nakBase      = 20 * time.Millisecond
	nakCap       = 500 * time.Millisecond
	claimTimeout = 10 * time.Second
	// maxClaiming is how many fetched attempts a worker claims at once. A
	// worker with thousands of free slots that fetches a burst would
	// otherwise start a goroutine per message, each waiting on Redis; the
	// claims share pipelines (leases' batcher), so a few hundred at once
	// keep Redis as busy as thousands would.
	maxClaiming = 256
	// claimerIdle is how long a claim's goroutine waits for the next claim
	// before it ends.
	claimerIdle = 5 * time.Second
)

// pollersPerHarness is how many pollers each hosted harness runs.
func pollersPerHarness(slots int) int { return min(slots, 4) }

func (w *Worker) poll(ctx context.Context, harnessID string, h *hosted) {
	defer w.fetchers.Done()
	log := w.log.WithField("harness", harnessID)
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		// Take one slot, waiting for it.
		select {
		case <-ctx.Done():
			return
		case w.slots <- struct{}{}:
		}
		n := 1
	more:
		for n < maxBatch {
			select {
			case w.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		// Take whatever is waiting, without waiting; when nothing is, keep
		// one slot and long-poll for one message.
		got, err := w.take(ctx, harnessID, h, n, func() (jetstream.MessageBatch, error) { return h.consumer.FetchNoWait(n) })
		if err == nil && got == 0 {
			for i := 1; i < n; i++ {
				w.releaseSlot()
			}
			n = 1
			fctx, cancel := context.WithTimeout(ctx, longPoll)
			got, err = w.take(ctx, harnessID, h, n, func() (jetstream.MessageBatch, error) {
				return h.consumer.Fetch(1, jetstream.FetchContext(fctx))
			})
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				err = nil // the long poll ended empty
			}
		}
		for i := got; i < n; i++ {
			w.releaseSlot()
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			d := bo.NextBackOff()
			log.WithField("retry_in", d).Warn("fetch failed: " + err.Error())
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		bo.Reset()
	}
}

// take runs one fetch and hands each message it yields to handle, in its own
// goroutine holding one of the poller's slots. It returns how many messages
// it handed out (each took its slot along) and the fetch's error.
func (w *Worker) take(ctx context.Context, harnessID string, h *hosted, n int, fetch func() (jetstream.MessageBatch, error)) (int, error) {
	batch, err := fetch()
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		if got == n {
			// More than asked for cannot happen; never run without a slot.
			_ = msg.Nak()
			continue
		}
		got++
		if !w.startClaim(ctx) {
			// Stopped fetching (drain) after the fetch was sent: give the
			// message back at once.
			_ = msg.Nak()
			w.releaseSlot()
			continue
		}
		w.fetchers.Add(1)
		w.claimers.Go(func() {
			defer w.fetchers.Done()
			defer func() { <-w.claiming }()
			w.handle(msg, harnessID, h)
		})
	}
	err = batch.Error()
	if errors.Is(err, jetstream.ErrNoMessages) {
		err = nil
	}
	return got, err
}

func (w *Worker) releaseSlot() { <-w.slots }

// startClaim waits for room among the claims in progress; false when ctx
// ended (fetching stopped) first.
func (w *Worker) startClaim(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case w.claiming <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

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

// settleFinishedBlocker makes the record of the attempt that blocks a's
// session agree with its durable result, when it has one. After a Redis
// failover that lost a finished attempt's outcome (and perhaps its claim),
// the promoted primary may still hold it as accepted or claimed at the head
// of its session's order: its message was acknowledged long ago, so no
// claim will ever end it, and the session's later turns would wait for its
// queue deadline. The results stream keeps the attempt's one outcome
// (docs/ARCHITECTURE.md, "Outcomes"); once it is in the record, the next
// claim walks past it.
func (w *Worker) settleFinishedBlocker(ctx context.Context, a *bus.Attempt, blocker string, log func() logrus.FieldLogger) {
	r, err := bus.GetResult(ctx, w.js, blocker)
	if err != nil {
		return // none (it is running or queued), or the stream did not answer: wait
	}
	changed, err := w.store.Adopt(ctx, leases.Tag(a.SessionKey), blocker, r.Outcome())
	if err != nil {
		log().Warn("the attempt ahead has a durable result, but its record could not be updated: " + err.Error())
		return
	}
	if changed {
		log().WithFields(logrus.Fields{"blocker": blocker, "outcome": r.Outcome()}).
			Warn("the attempt ahead had finished (its durable result exists) but its record said otherwise (writes lost in a Redis failover); the record now agrees")
	}
}

// handle processes one fetched message; it holds one slot, which it passes to
// the run when the claim succeeds and releases otherwise.
func (w *Worker) handle(msg jetstream.Msg, harnessID string, h *hosted) {
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
	ctx, cancel := context.WithTimeout(w.runCtx, claimTimeout)
	defer cancel()
	lease, res, err := w.keep.Claim(ctx, a.SessionKey, a.AttemptID, harnessID)
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
			w.settleFinishedBlocker(ctx, a, res.Blocker, log)
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
		w.publishOrphan(ctx, a, harnessID, teamster.Errorf(teamster.CodeInternal,
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
				_ = msg.Ack() // the fleet settled it; the reaper publishes
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
		started = true
		r.execute()
	}
}

// attemptLog is the logger of one attempt on this worker: the attempt, the
// session (hashed, never raw) and the harness.
func (w *Worker) attemptLog(a *bus.Attempt, harnessID string) logrus.FieldLogger {
	return w.log.WithFields(logrus.Fields{"attempt": a.AttemptID, "session": leases.Tag(a.SessionKey), "harness": harnessID})
}

func errString(err error, fallback string) string {
	if err != nil {
		return err.Error()
	}
	return fallback
}
