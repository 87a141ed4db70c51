package router

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/internal/retry"
	"github.com/teamster-fleet/teamster/leases"
)

// Reaper settings.
const (
	reapBatch = 256
	// reapVisibility hides handed-out entries from other routers' reapers;
	// a router that dies mid-batch leaves them to be picked up after it.
	reapVisibility = 30 * time.Second
	// publishGrace is how long a worker's recorded outcome may stay
	// unmarked before the reaper publishes it again.
	publishGrace = 5 * time.Second
	// markRetry is how long the reaper retries marking an outcome published.
	markRetry = 5 * time.Second
)

type reaperParams struct {
	store    *leases.Store
	js       jetstream.JetStream
	nc       *nats.Conn
	interval time.Duration
	log      logrus.FieldLogger
	m        *metrics.Router
}

// reaper gives the fleet outcome that no worker will: queue_timeout for attempts nobody
// claimed in time, worker_lost for attempts whose worker died, and it
// republishes outcomes whose writer died before marking them published.
// Every router runs one; there is no leader (leases.Store.Due hands each
// entry to one reaper at a time, and every decision is first writer wins).
type reaper struct {
	reaperParams
	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newReaper(p reaperParams) *reaper {
	return &reaper{reaperParams: p, stopCh: make(chan struct{})}
}

func (rp *reaper) start() {
	rp.wg.Add(1)
	go rp.loop()
}

func (rp *reaper) stop() {
	rp.stopOnce.Do(func() { close(rp.stopCh) })
	rp.wg.Wait()
}

func (rp *reaper) loop() {
	defer rp.wg.Done()
	t := time.NewTicker(rp.interval)
	defer t.Stop()
	for {
		select {
		case <-rp.stopCh:
			return
		case <-t.C:
		}
		for rp.sweep() {
			// A full batch from some shard: more are due; keep going
			// unless stopped.
			select {
			case <-rp.stopCh:
				return
			default:
			}
		}
	}
}

// sweep handles one batch of due entries from every index shard and
// reports whether some shard had a full batch (more are due).
func (rp *reaper) sweep() bool {
	ctx, cancel := context.WithTimeout(context.Background(), reapVisibility/2)
	defer cancel()
	entries, full, err := rp.store.Due(ctx, reapBatch, reapVisibility)
	if err != nil {
		rp.log.Warn("reaper: " + err.Error())
		return false
	}
	for _, e := range entries {
		rp.reap(ctx, e)
	}
	return full
}

func (rp *reaper) reap(ctx context.Context, e leases.DueEntry) {
	log := rp.log.WithFields(logrus.Fields{"attempt": teamster.ScopedDisplay(e.AttemptID), "session": e.Tag})
	// The reaper's marker token for this attempt: the mark it makes when it
	// publishes, or the mark it takes over from a marker that never
	// confirmed sending.
	by := leases.MarkerToken()
	// A mark the reap takes over starts its window in Redis while the script
	// runs, after this: the send-by time counts from here, never later.
	sent := time.Now()
	res, err := rp.store.Reap(ctx, e, publishGrace, by)
	if err != nil {
		log.Warn("reaper: " + err.Error())
		return
	}
	switch res.Action {
	case leases.ReapPublish:
		rp.publish(ctx, log, e, res, by)
	case leases.ReapResend:
		rp.resend(ctx, log, e, res, sent, by)
	}
}

// publish stores an outcome the reaper decided (or republishes one a worker
// recorded) on the results stream, marks it published, and sends its result
// event when the reaper's mark was the first.
func (rp *reaper) publish(ctx context.Context, log logrus.FieldLogger, e leases.DueEntry, res leases.Reaped, by string) {
	var err error
	body := res.Result
	if len(body) == 0 {
		if body, err = fleetResult(unscoped(e.AttemptID), res); err != nil {
			log.Error("reaper: " + err.Error())
			return
		}
	}
	err = bus.PublishResultBody(ctx, rp.js, e.AttemptID, body)
	exists := errors.Is(err, bus.ErrResultExists)
	switch {
	case exists:
		log.Info("reaper: another result was published first; nothing owed")
		rp.adopt(ctx, log, e, res)
	case err != nil:
		log.Warn("reaper: publish failed; retried after the visibility window: " + err.Error())
		return
	default:
		log.WithFields(logrus.Fields{"outcome": res.Outcome, "worker": res.WorkerID}).Info("reaper published the attempt's result")
		rp.m.Reaped.WithLabelValues(res.Outcome).Inc()
	}
	// Published, marked, and only then sent (docs/PROTOCOL.md), by the first to
	// mark it: the worker, or another reaper, may have published the same
	// outcome meanwhile and sent its result event.
	// A mark whose reply was lost may have been made: it is tried again
	// with the same token, which Redis answers as this reaper's mark, so
	// the event is still sent (by this reaper, once).
	var marked leases.Marked
	var markSent time.Time
	err = retry.For(ctx, markRetry, func() error {
		var err error
		markSent = time.Now()
		marked, err = rp.store.MarkPublishedTag(ctx, e.Tag, e.AttemptID, by)
		return err
	})
	switch {
	case err != nil:
		log.Warn("reaper: mark published failed; the reaper that marks it sends the result event: " + err.Error())
	case marked != leases.MarkedNow:
		log.Info("reaper: the result was marked published by another, which sends the result event")
	case exists || res.ReplyTo == "":
		// Another result stands (its publisher sends it), or nobody listens.
		rp.confirm(ctx, log, e, by)
	default:
		rp.send(ctx, log, e, res, body, markSent, by)
	}
}

// resend sends the result event of an outcome whose marker did not confirm
// sending it within its send window (it died, or stalled, between its mark
// and the event): the reaper holds the mark now (taken over by the reap
// sent at markSent), and sends the durable result. The submitter may get the event twice, if the marker sent it and
// then stalled before confirming; clients keep the first result event.
func (rp *reaper) resend(ctx context.Context, log logrus.FieldLogger, e leases.DueEntry, res leases.Reaped, markSent time.Time, by string) {
	if res.ReplyTo == "" {
		rp.confirm(ctx, log, e, by)
		return
	}
	body, err := bus.GetResultBody(ctx, rp.js, e.AttemptID)
	if err != nil {
		// The reaper tries again once the mark's window has passed.
		log.Warn("reaper: the durable result could not be read to send its result event: " + err.Error())
		return
	}
	log.WithField("worker", res.WorkerID).Info("reaper: the result event was not confirmed sent by its marker; sending it")
	rp.m.Resent.Inc()
	rp.send(ctx, log, e, res, body, markSent, by)
}

// send sends the result event as the holder of the attempt's mark, made at
// markSent, and confirms it. A reaper held up past its mark's send-by time
// sends nothing: another reaper takes the mark over and sends it.
func (rp *reaper) send(ctx context.Context, log logrus.FieldLogger, e leases.DueEntry, res leases.Reaped, body []byte, markSent time.Time, by string) {
	if time.Now().After(leases.SendBy(markSent)) {
		log.Warn("reaper: too late to send the result event under its mark; another reaper sends it")
		return
	}
	ev := &bus.Event{V: bus.Version, AttemptID: unscoped(e.AttemptID), Seq: res.SeqMax + 1, Type: bus.EventResult, Data: body}
	if err := bus.SendEvent(rp.nc, res.ReplyTo, ev); err != nil {
		// Not sent (the connection is down): leave the mark unconfirmed, so
		// that a reaper sends it after the window.
		log.Debug("reaper: result event not sent: " + err.Error())
		return
	}
	rp.confirm(ctx, log, e, by)
}

// confirm records that the reaper's mark owes nothing more.
func (rp *reaper) confirm(ctx context.Context, log logrus.FieldLogger, e leases.DueEntry, by string) {
	err := retry.For(ctx, markRetry, func() error {
		_, err := rp.store.ConfirmSentTag(ctx, e.Tag, e.AttemptID, by)
		return err
	})
	if err != nil {
		log.Warn("reaper: the result event's sending not confirmed; a reaper may send it again: " + err.Error())
	}
}

// adopt makes the record agree with the durable result that stands, when
// it is not the outcome the reaper found recorded: after a failover that
// lost the worker's outcome, the fleet gives the attempt its outcome again on the
// promoted primary, but the results stream kept the worker's result, and
// that is the attempt's one outcome.
func (rp *reaper) adopt(ctx context.Context, log logrus.FieldLogger, e leases.DueEntry, res leases.Reaped) {
	r, err := bus.GetResult(ctx, rp.js, e.AttemptID)
	if err != nil {
		log.Warn("reaper: the durable result could not be read to check the recorded outcome: " + err.Error())
		return
	}
	outcome := r.Outcome()
	if outcome == res.Outcome {
		return
	}
	changed, err := rp.store.Adopt(ctx, e.Tag, e.AttemptID, outcome)
	switch {
	case err != nil:
		log.Warn("reaper: " + err.Error())
	case changed:
		log.WithFields(logrus.Fields{"recorded": res.Outcome, "outcome": outcome}).
			Warn("reaper: the recorded outcome disagreed with the durable result (writes lost in a Redis failover); the record now holds the durable one")
		rp.m.Adopted.Inc()
	}
}

// fleetResult builds the result of an outcome the fleet recorded
// (queue_timeout, worker_lost). The bytes depend only on the record, so every
// reaper that builds it builds the same bytes.
func fleetResult(attemptID string, res leases.Reaped) ([]byte, error) {
	var e *teamster.Error
	switch teamster.Code(res.Outcome) {
	case teamster.CodeQueueTimeout:
		e = teamster.Errorf(teamster.CodeQueueTimeout, "no worker claimed the attempt before its queue deadline").
			WithSideEffects(teamster.SideEffectsNone)
	case teamster.CodeWorkerLost:
		e = teamster.Errorf(teamster.CodeWorkerLost, "the worker running the attempt stopped renewing its lease").
			WithSideEffects(teamster.SideEffectsPossible)
	default:
		code := teamster.Code(res.Outcome)
		if !code.Valid() {
			code = teamster.CodeInternal
		}
		e = teamster.Errorf(code, "the attempt ended with %s", res.Outcome).WithSideEffects(teamster.SideEffectsPossible)
	}
	r := bus.NewErrorResult(attemptID, e)
	r.HarnessID, r.WorkerID, r.Fence = res.HarnessID, res.WorkerID, res.Fence
	return bus.Encode(r)
}

// unscoped is an attempt's id as its tenant knows it: the index, the
// records and the lease hold it scoped (teamster.Scope), its results and
// events carry it plain.
func unscoped(scopedID string) string {
	_, id := teamster.Unscope(scopedID)
	return id
}
