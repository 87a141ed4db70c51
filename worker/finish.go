package worker

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/retry"
	"github.com/teamster-fleet/teamster/leases"
)

// Phase 4 of a run, the fenced finish: the run's one outcome goes into the
// attempt's record in Redis, and the phase says what stands there
// (recording) to the delivery, which runs after it on the same goroutine.
//
// The retry budgets of a run's end, one per step, each the only bound of
// that step (internal/retry: exponential backoff from 50 ms, at most 2 s
// apart):
//
//	step                  budget                       when it runs out
//	commit (Finish)       while the lease is current,  abandon, as lease_lost
//	                      at most one lease TTL
//	abandon (Abandon)     abandonBudget (2 min)        nothing recorded: the reaper answers worker_lost
//	publish (durable)     publishBudget (1 min)        nothing published: the reaper republishes and sends
//	mark, confirm         markBudget (10 s) each       the reaper republishes, or sends the event again
const (
	abandonBudget = 2 * time.Minute
	publishBudget = time.Minute
	// markBudget: any length is safe (the first marker sends the result
	// event, within its send window); past it the reaper takes over.
	markBudget = 10 * time.Second
)

// recording is what the fenced finish leaves to the delivery.
type recording struct {
	kind   recordKind
	body   []byte // the encoded result, as recorded
	status teamster.Status
	// session: the session record update (with the saved native state)
	// was committed.
	session bool
}

// recordKind is what stands in Redis after the fenced finish.
type recordKind uint8

const (
	// dropped: nothing of this run's: another outcome stands (the fleet's,
	// or a reaper's), or nothing got through. Deliver nothing.
	dropped recordKind = iota
	// givenUp: no result to record; the lease was released, so the fleet
	// answers worker_lost. Count the run; send nothing.
	givenUp
	// recorded: this run's outcome is the attempt's, under its fence.
	// Publish, mark, send the result event as the first marker, confirm.
	recorded
	// unrecorded: Redis has no record of the attempt (it lost its data).
	// Publish (the stream alone decides which result stands) and send.
	unrecorded
)

// finish ends the run with res, once, whoever calls it first (a refusal
// under the lease, the turn, the grace watchdog): it records res under the
// lease and delivers what was recorded. After a Kill it does nothing: a
// dead worker records and publishes nothing.
func (r *run) finish(res *bus.Result) { r.finishTurn(res, "") }

// finishTurn is finish for the turn's own result, with the name of the
// native state object the turn saved ("" for none): the fenced finish writes
// that name into the session record. Once the result is delivered, the
// object the record no longer names is deleted: the record's previous one
// when this finish committed, else the one this turn saved.
func (r *run) finishTurn(res *bus.Result, state string) {
	if r.w.killed.Load() {
		return
	}
	ctx := context.Background()
	if !r.advance(stepFinish) {
		r.dropState(ctx, state)
		return
	}
	rec := r.record(ctx, res, state)
	r.deliver(ctx, rec)
	switch {
	case rec.session && r.session != nil && r.session.NativeState != state:
		r.dropState(ctx, r.session.NativeState)
	case !rec.session:
		r.dropState(ctx, state)
	}
}

// record is the fenced finish (outcome, session record, order, lease in one
// script) of res. A run whose lease is gone commits nothing: its outcome
// becomes lease_lost and is recorded only if no other outcome was
// (abandon).
func (r *run) record(ctx context.Context, res *bus.Result, state string) recording {
	if res.Error != nil && res.Error.Code == teamster.CodeLeaseLost {
		return r.abandon(ctx, res)
	}
	// Reserve the result event's seq while the lease is still held.
	_ = r.lease.NoteSeq(ctx, r.nextSeq())

	res, body := r.encodeResult(res)
	if body == nil {
		return r.giveUp(ctx)
	}
	outcome := leases.Outcome{Code: res.Outcome(), Result: body}
	if res.Error == nil {
		outcome.Session = r.sessionUpdate(res, state)
	}
	var st leases.FinishStatus
	err := retry.For(ctx, r.w.cfg.LeaseTTL(), func() error {
		var ferr error
		st, ferr = r.lease.Finish(ctx, outcome)
		if ferr != nil && !r.lease.Current() {
			return backoff.Permanent(ferr)
		}
		return ferr
	})
	switch {
	case err != nil:
		r.log().Warn("finish failed and the lease is no longer current: " + err.Error())
		return r.abandon(ctx, r.leaseLostResult("the worker could not record the outcome before its lease ran out: "+err.Error()))
	case st == leases.Finished:
		if r.w.steps.Enabled() {
			r.w.steps.Log(r.log().WithFields(finishFields(res)), "finished")
		}
		return recording{kind: recorded, body: body, status: res.Status, session: outcome.Session != nil}
	case st == leases.FinishAlready:
		r.log().Warn("the attempt already had an outcome (the fleet recorded one first); this run's result is dropped")
		return recording{kind: dropped}
	default: // fenced or missing: the lease was lost before the commit
		return r.abandon(ctx, r.leaseLostResult("the lease was lost before the outcome could be committed ("+string(st)+")"))
	}
}

// finishFields are the fields of a finish's log line: status, and the code
// of an error.
func finishFields(res *bus.Result) logrus.Fields {
	f := logrus.Fields{"status": res.Status}
	if res.Error != nil {
		f["code"] = res.Error.Code
	}
	return f
}

// abandon records an error outcome for a run that lost its lease, unless the
// fleet recorded one first. Redis may be down: it retries for a while, and if
// it never gets through, the reaper answers the attempt worker_lost later.
func (r *run) abandon(ctx context.Context, res *bus.Result) recording {
	res, body := r.encodeResult(res)
	if body == nil {
		return r.giveUp(ctx)
	}
	var st leases.FinishStatus
	err := retry.For(ctx, abandonBudget, func() error {
		var aerr error
		st, aerr = r.lease.Abandon(ctx, string(res.Error.Code), body)
		return aerr
	})
	switch {
	case err != nil:
		r.log().Error("could not record the lost run's outcome; the reaper will answer it: " + err.Error())
		return recording{kind: dropped}
	case st == leases.Finished:
		if r.w.steps.Enabled() {
			r.w.steps.Log(r.log().WithFields(finishFields(res)), "finished after losing the lease")
		}
		return recording{kind: recorded, body: body, status: res.Status}
	case st == leases.FinishMissing:
		// Redis lost the record: the durable stream alone decides.
		r.log().Warn("no record of the attempt any more (Redis lost its data); publishing " + string(res.Error.Code) + " directly")
		return recording{kind: unrecorded, body: body, status: res.Status}
	default:
		r.log().Info("the attempt already had an outcome; this run's " + string(res.Error.Code) + " is dropped")
		return recording{kind: dropped}
	}
}

// giveUp ends a run that has no result to record: it releases the lease, so
// that a reaper answers the attempt worker_lost (within a lease TTL, when it
// next looks) or the session's next claim does, instead of the keeper
// renewing the lease forever and holding the session's next turn.
func (r *run) giveUp(ctx context.Context) recording {
	if err := r.lease.Release(ctx); err != nil {
		r.log().Warn("giving up the run: release the lease: " + err.Error())
	}
	return recording{kind: givenUp, status: teamster.StatusError}
}

// encodeResult encodes res. A result that cannot be encoded (a harness's
// native session or runtime artifact that is not valid JSON, say) becomes
// harness_failed, which always encodes: a turn never ends without a result,
// and its lease is never left with the keeper, renewed for a run that has
// ended. It returns a nil body only if even that fails.
func (r *run) encodeResult(res *bus.Result) (*bus.Result, []byte) {
	body, err := bus.Encode(res)
	if err == nil {
		return res, body
	}
	r.log().Error("the result could not be encoded; reporting harness_failed instead: " + err.Error())
	res = r.errorResult(teamster.Errorf(teamster.CodeHarnessFailed, "the harness's result could not be encoded: %v", err))
	if body, err = bus.Encode(res); err != nil {
		r.log().Error("the harness_failed result could not be encoded either: " + err.Error())
		return res, nil
	}
	return res, body
}

func (r *run) leaseLostResult(msg string) *bus.Result {
	return r.errorResult(teamster.Errorf(teamster.CodeLeaseLost, "%s", msg).WithSideEffects(teamster.SideEffectsPossible))
}

// sessionUpdate is what a successful turn writes to the session record: the
// owner's turn pins the harness and records the session facts, the native
// binding and the name of its saved native state; a delegate's turn writes
// the binding and its state only.
func (r *run) sessionUpdate(res *bus.Result, state string) leases.SessionUpdate {
	binding := ""
	if len(res.NativeSession) > 0 && string(res.NativeSession) != "null" {
		binding = string(res.NativeSession)
	}
	if r.delegate != "" {
		if binding == "" {
			return nil
		}
		return leases.BindingUpdate(binding, state)
	}
	m := r.h.impl.Manifest()
	u := leases.OwnerUpdate(teamster.SessionRecord{
		SessionKey: r.attempt.SessionKey, SessionID: r.attempt.SessionID, StorePath: r.attempt.StorePath,
		AgentID: r.attempt.AgentID, ModelSelectionLocked: r.attempt.ModelSelectionLocked,
		AgentHarnessID: r.harnessID, OwnerPluginID: m.PluginID, NativeBinding: binding, NativeState: state,
	})
	if state == "" && (r.session == nil || r.session.NativeState == "") {
		// Nothing to write or clear: the finish script of a harness that
		// keeps no native state carries no field for it.
		delete(u, teamster.SessionFieldNativeState)
	}
	return u
}
