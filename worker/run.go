package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/delegation"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/internal/retry"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
)

// run is one claimed attempt on this worker, from claim to published result.
type run struct {
	w         *Worker
	attempt   *bus.Attempt
	harnessID string
	h         *hosted
	lease     *leases.Lease
	delegate  string

	ctx     context.Context
	cancel  context.CancelCauseFunc
	started time.Time

	// mu serialises events, so seq numbers reach the wire in order.
	mu    sync.Mutex
	seq   int64
	ended bool
	// reserving is closed when an emitter's extension of the seq
	// reservation, made outside mu, is done.
	reserving chan struct{}
	usage     map[string]bool
	tokens    int64

	subs []*nats.Subscription // teamster.run.<attemptId>.inject and .cancel
	inj  injections
	// session is the session record the claim read under the lease.
	session *leases.SessionRecord
	// finishing is set by the first finish; a run finishes once.
	finishing atomic.Bool
}

func (w *Worker) newRun(a *bus.Attempt, harnessID string, h *hosted, l *leases.Lease, delegate string) *run {
	ctx, cancel := context.WithCancelCause(w.runCtx)
	r := &run{w: w, attempt: a, harnessID: harnessID, h: h, lease: l, delegate: delegate, started: time.Now(),
		ctx: ctx, cancel: cancel, inj: injections{ready: make(chan struct{})}}
	w.addRun(r)
	return r
}

// log is the run's logger. Its fields are attached when something is
// logged, not held by the run: a running turn does not keep a map of log
// fields (about 0.4 KiB live per turn).
func (r *run) log() logrus.FieldLogger {
	return r.w.attemptLog(r.attempt, r.harnessID).WithField("fence", r.lease.Fence())
}

// execute runs the attempt and publishes its one result. It owns one slot.
// The checks before the harness run on the caller's goroutine (the claim's,
// which ends here); the turn gets a goroutine of its own whose first frame is
// small: a turn that sleeps in its harness holds the run's stack for as long
// as it runs, and Go's runtime halves a sleeping goroutine's stack at a
// garbage collection only when under a quarter of it is in use (make bench,
// memory: 8 KiB of stack in use per sleeping turn before, 4-5.5 KiB after).
func (r *run) execute() {
	binding, ok := r.prepare()
	if !ok {
		r.end()
		return
	}
	go r.turn(binding)
}

// turn runs the harness, in the run's own goroutine, under the attempt's
// deadline and the lease: a lost lease, a cancel or a drain timeout cancels
// the run's context with that cause. After the context ends, the harness has
// the attempt's settlement budget to return; a harness that does not is left
// behind: a watchdog ends the attempt with the cause (finish runs once,
// whoever calls it first), and the slot stays taken until the harness
// returns. Then it finishes the attempt with the harness's outcome.
func (r *run) turn(binding json.RawMessage) {
	defer r.end()
	// A worker held up (a pause) between its claim and here may wake with
	// its lease gone and the session's next turn already running: the
	// harness must not start then. It fails honestly, having done nothing.
	if !r.lease.Current() {
		r.finish(r.errorResult(teamster.Errorf(teamster.CodeLeaseLost,
			"the lease was lost before the harness started (the worker was held up after its claim); nothing ran").
			WithSideEffects(teamster.SideEffectsNone)))
		return
	}
	ctx, cancel := r.turnContext()
	defer cancel()
	w := r.watchSettlement(ctx)
	out, err := r.callHarness(ctx, r.harnessRun(ctx, binding))
	w.stop()
	// Items the harness left unsettled are settled cancelled before the
	// result, so their sender hears of each.
	r.settleLeftovers()
	err = r.harnessError(ctx, out, err)
	cancel()
	if err == nil {
		// Host-owned media must be among the tool media the turn reported.
		err = out.CheckToolMedia()
	}
	if err != nil {
		r.finish(r.errorResult(teamster.AsError(err)))
		return
	}
	r.finish(r.okResult(out))
}

// end releases what the run held once its result is out (or given up): its
// subjects, its context, its place among the worker's runs, its slot.
func (r *run) end() {
	r.unsubscribe()
	r.cancel(nil)
	r.w.removeRun(r)
	r.w.releaseSlot()
}

// prepare subscribes the run's subjects, sends the claimed event and makes
// the checks due under the lease before the harness starts. It returns the
// session's native binding, and false when the attempt was refused (and
// finished with the refusal).
func (r *run) prepare() (json.RawMessage, bool) {
	// A lost lease ends everything the run does, from here on (the keeper's
	// OnLost cancels the run; a loss before the run was registered is
	// caught here).
	if err := r.lease.Err(); err != nil {
		r.cancel(teamster.AsError(err))
	}
	if err := r.subscribe(); err != nil {
		r.log().Warn("run subjects not subscribed; cancel cannot reach this run: " + err.Error())
	}
	_ = r.emit(bus.EventClaimed, bus.ClaimedData{WorkerID: r.w.id, HarnessID: r.harnessID, Fence: r.lease.Fence()})
	if r.w.debug {
		r.log().Debug("claimed")
	}

	// Re-check under the lease: the harness's own Supports.
	if ok, why := r.h.impl.Supports(r.attempt); !ok {
		r.finish(r.errorResult(teamster.Errorf(teamster.CodeHarnessUnsupportedRoute,
			"harness %s does not support the prepared route: %s", r.harnessID, why).WithSideEffects(teamster.SideEffectsNone)))
		return nil, false
	}
	// The claim read the session record under the new lease.
	rec := r.session
	// A delegate's attempt is checked again here, under the lease, against
	// the record read under it: this check, not the router's, counts.
	if r.delegate != "" {
		if err := r.checkDelegate(rec); err != nil {
			r.log().WithFields(logrus.Fields{"delegate": r.delegate, "field": delegation.DeniedField(err)}).Info("delegated attempt refused under the lease")
			r.finish(r.errorResult(teamster.AsError(err).WithSideEffects(teamster.SideEffectsNone)))
			return nil, false
		}
	}
	// A verified continuation names the exact runtime it expects: check it
	// before the harness starts anything native.
	if exp := r.attempt.ExpectedRuntimeArtifact; exp != nil {
		if err := r.validateArtifact(*exp); err != nil {
			r.finish(r.errorResult(teamster.AsError(err).WithSideEffects(teamster.SideEffectsNone)))
			return nil, false
		}
	}
	var binding json.RawMessage
	if rec != nil && rec.NativeBinding != "" {
		binding = json.RawMessage(rec.NativeBinding)
	}
	// Last check before the harness starts: a worker that woke from a pause
	// longer than its lease must not start anything.
	if !r.lease.Current() {
		r.finish(r.errorResult(teamster.Errorf(teamster.CodeLeaseLost,
			"the lease was no longer current when the harness was to start").WithSideEffects(teamster.SideEffectsNone)))
		return nil, false
	}
	return binding, true
}

// checkDelegate runs the delegated-execution rule against the stored record,
// with the manifest of the harness it pins as this worker hosts it.
func (r *run) checkDelegate(rec *leases.SessionRecord) error {
	var pinned selection.Manifest
	if rec != nil {
		if h, ok := r.w.harnesses[rec.AgentHarnessID]; ok {
			pinned = h.impl.Manifest()
		}
	}
	return delegation.Check(r.attempt.DelegationRequest(r.delegate), rec.Delegation(), pinned)
}

// validateArtifact checks an expected runtime artifact with the harness's
// own validation; a harness that cannot validate artifacts cannot honour the
// request, which is a mismatch too.
func (r *run) validateArtifact(exp bus.RuntimeArtifact) error {
	v, ok := r.h.impl.(harness.ArtifactValidator)
	if !ok {
		return teamster.Errorf(teamster.CodeRuntimeArtifactMismatch, "harness %s cannot verify runtime artifacts", r.harnessID)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	if err := v.ValidateRuntimeArtifact(ctx, exp); err != nil {
		if teamster.CodeOf(err) == teamster.CodeInternal {
			return teamster.Errorf(teamster.CodeRuntimeArtifactMismatch, "%v", err)
		}
		return err
	}
	return nil
}

// turnContext is the run's context under the attempt's timeout.
func (r *run) turnContext() (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(r.ctx, r.attempt.Timeout(),
		teamster.Errorf(teamster.CodeDeadlineExceeded, "the attempt ran past its timeout of %s", r.attempt.Timeout()))
}

// harnessRun is what the harness is given to run the attempt.
func (r *run) harnessRun(ctx context.Context, binding json.RawMessage) *harness.Run {
	hr := &harness.Run{Attempt: r.attempt, Host: (*host)(r), WorkerID: r.w.id, Fence: r.lease.Fence(),
		Delegate: r.delegate, Binding: binding, Current: func() bool { return ctx.Err() == nil && r.lease.Current() }}
	hr.OnInjector(r.setInjector)
	return hr
}

// settlementWatch ends the attempt without the harness when the harness has
// not returned within the settlement budget after the run's context ended.
type settlementWatch struct {
	stopWatch func() bool
	mu        sync.Mutex
	watchdog  *time.Timer
}

func (r *run) watchSettlement(ctx context.Context) *settlementWatch {
	w := &settlementWatch{}
	w.stopWatch = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.watchdog = time.AfterFunc(r.attempt.SettlementTimeout(), func() {
			r.log().Error("the harness did not return within its settlement budget after cancellation; ending the attempt without it")
			r.settleLeftovers()
			r.finish(r.errorResult(teamster.AsError(context.Cause(ctx))))
		})
	})
	return w
}

func (w *settlementWatch) stop() {
	w.stopWatch()
	w.mu.Lock()
	if w.watchdog != nil {
		w.watchdog.Stop()
	}
	w.mu.Unlock()
}

// harnessError is the run's error from what the harness returned: the
// cause when the run was ended from outside, harness_failed for an untyped
// error or for neither an outcome nor an error.
func (r *run) harnessError(ctx context.Context, out *harness.Outcome, err error) error {
	if err == nil && out == nil {
		err = teamster.Errorf(teamster.CodeHarnessFailed, "harness returned neither an outcome nor an error")
	}
	if err != nil && ctx.Err() != nil {
		// The run was ended from outside: the cause, not whatever error the
		// harness turned it into, is the outcome.
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
	}
	if err != nil {
		var te *teamster.Error
		if !errors.As(err, &te) {
			err = teamster.Errorf(teamster.CodeHarnessFailed, "%v", err)
		}
	}
	return err
}

// callHarness calls RunAttempt; a panic is harness_failed.
func (r *run) callHarness(ctx context.Context, hr *harness.Run) (out *harness.Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, teamster.Errorf(teamster.CodeHarnessFailed, "harness panicked: %v", p)
		}
	}()
	return r.h.impl.RunAttempt(ctx, hr)
}

func (r *run) baseResult() *bus.Result {
	r.mu.Lock()
	tokens := r.tokens
	r.mu.Unlock()
	return &bus.Result{V: bus.Version, AttemptID: r.attempt.AttemptID, HarnessID: r.harnessID, WorkerID: r.w.id,
		Fence: r.lease.Fence(), AssistantTexts: []string{}, Usage: bus.Usage{OutputTokens: tokens}}
}

func (r *run) okResult(o *harness.Outcome) *bus.Result {
	res := r.baseResult()
	res.Status = teamster.StatusOK
	if o.AssistantTexts != nil {
		res.AssistantTexts = o.AssistantTexts
	}
	res.Classification = o.Classification()
	res.LastToolError = o.LastToolError
	res.NativeSession = o.NativeSession
	res.RuntimeArtifact = o.RuntimeArtifact
	return res
}

func (r *run) errorResult(e *teamster.Error) *bus.Result {
	if e.SideEffects == "" {
		// The harness ran: it may have done something.
		e = e.WithSideEffects(teamster.SideEffectsPossible)
	}
	res := r.baseResult()
	res.Status = e.Code.ResultStatus()
	res.Error = e
	return res
}

// finish records the result under the lease and publishes it: the fenced
// finish (outcome, session record, order, lease in one script), then the
// durable result, then the mark, then (for the first marker) the result
// event. A run whose lease is gone commits nothing: its outcome becomes
// lease_lost and is recorded only if no other outcome was (Abandon).
func (r *run) finish(res *bus.Result) {
	if r.w.isKilled() || !r.finishing.CompareAndSwap(false, true) {
		return
	}
	ctx := context.Background()
	if res.Error != nil && res.Error.Code == teamster.CodeLeaseLost {
		r.abandon(ctx, res)
		return
	}
	// Reserve the result event's seq while the lease is still held.
	r.mu.Lock()
	next := r.seq + 1
	r.mu.Unlock()
	_ = r.lease.NoteSeq(ctx, next)

	res, body := r.encodeResult(res)
	if body == nil {
		r.giveUp(ctx)
		return
	}
	outcome := leases.Outcome{Code: res.Outcome(), Result: body}
	if res.Error == nil {
		outcome.Session = r.sessionUpdate(res)
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
		r.abandon(ctx, r.leaseLostResult("the worker could not record the outcome before its lease ran out: "+err.Error()))
	case st == leases.Finished:
		r.deliver(ctx, body, res.Status)
	case st == leases.FinishAlready:
		r.log().Warn("the attempt already had an outcome (the fleet settled it first); this run's result is dropped")
	default: // fenced or missing: the lease was lost before the commit
		r.abandon(ctx, r.leaseLostResult("the lease was lost before the outcome could be committed ("+string(st)+")"))
	}
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

// giveUp ends a run that has no result to record: it releases the lease, so
// that a reaper settles the attempt worker_lost (within a lease TTL, when it
// next looks) or the session's next claim does, instead of the keeper
// renewing the lease forever and holding the session's next turn.
func (r *run) giveUp(ctx context.Context) {
	if err := r.lease.Release(ctx); err != nil {
		r.log().Warn("giving up the run: release the lease: " + err.Error())
	}
	r.endResult(nil, teamster.StatusError, false)
}

func (r *run) leaseLostResult(msg string) *bus.Result {
	return r.errorResult(teamster.Errorf(teamster.CodeLeaseLost, "%s", msg).WithSideEffects(teamster.SideEffectsPossible))
}

// sessionUpdate is what a successful turn writes to the session record: the
// owner's turn pins the harness and records the session facts and the native
// binding; a delegate's turn writes the binding only.
func (r *run) sessionUpdate(res *bus.Result) leases.SessionUpdate {
	binding := ""
	if len(res.NativeSession) > 0 && string(res.NativeSession) != "null" {
		binding = string(res.NativeSession)
	}
	if r.delegate != "" {
		if binding == "" {
			return nil
		}
		return leases.BindingUpdate(binding)
	}
	m := r.h.impl.Manifest()
	return leases.OwnerUpdate(leases.SessionRecord{
		SessionKey: r.attempt.SessionKey, SessionID: r.attempt.SessionID, StorePath: r.attempt.StorePath,
		AgentID: r.attempt.AgentID, ModelSelectionLocked: r.attempt.ModelSelectionLocked,
		AgentHarnessID: r.harnessID, OwnerPluginID: m.PluginID, NativeBinding: binding,
	})
}

// abandon records an error outcome for a run that lost its lease, unless the
// fleet recorded one first. Redis may be down: it retries for a while, and if
// it never gets through, the reaper settles the attempt worker_lost later.
func (r *run) abandon(ctx context.Context, res *bus.Result) {
	res, body := r.encodeResult(res)
	if body == nil {
		r.giveUp(ctx)
		return
	}
	var st leases.FinishStatus
	err := retry.For(ctx, 2*time.Minute, func() error {
		var aerr error
		st, aerr = r.lease.Abandon(ctx, string(res.Error.Code), body)
		return aerr
	})
	switch {
	case err != nil:
		r.log().Error("could not record the lost run's outcome; the reaper will settle it: " + err.Error())
	case st == leases.Finished:
		r.deliver(ctx, body, res.Status)
	case st == leases.FinishMissing:
		// Redis lost the record: the durable stream alone decides.
		r.log().Warn("no record of the attempt any more (Redis lost its data); publishing " + string(res.Error.Code) + " directly")
		r.deliverUnrecorded(ctx, body, res.Status)
	default:
		r.log().Info("the attempt already had an outcome; this run's " + string(res.Error.Code) + " is dropped")
	}
}

// deliver publishes a recorded outcome durably, marks it published, and only
// then sends it to the submitter (docs/PROTOCOL.md), and only when this worker's
// mark was the first: a reaper that republished the outcome meanwhile (this
// worker took longer than the reaper's grace, say through a NATS outage) has
// sent the result event itself, and a submitter gets it once. The mark opens
// the worker's send window (leases.SendWindow): it sends the event within it
// and confirms it, and a mark it never confirms (it died or stalled between
// the mark and the event) is taken over by a reaper, which sends the event.
// If the durable publish never succeeds, or the mark never gets through, the
// reaper republishes the outcome from the record and sends it.
func (r *run) deliver(ctx context.Context, body []byte, status teamster.Status) {
	if !r.publishDurable(ctx, body) {
		return
	}
	var marked leases.Marked
	var markSent time.Time
	err := retry.For(ctx, markBudget, func() error {
		var merr error
		markSent = time.Now()
		// The claim's fence is this run's marker token: no other run has it.
		marked, merr = r.w.store.MarkPublished(ctx, r.attempt.SessionKey, r.attempt.AttemptID, r.lease.Fence())
		return merr
	})
	if h := r.w.hooks.Load(); h != nil && h.afterMark != nil {
		h.afterMark(r.attempt.AttemptID)
	}
	switch {
	case err != nil:
		r.log().Warn("result not marked published; the reaper publishes it again and sends the result event: " + err.Error())
		r.endResult(body, status, false)
	case marked == leases.MarkedBefore:
		r.log().Info("a reaper published the result first and sent the result event")
		r.endResult(body, status, false)
	case marked == leases.MarkedGone:
		// No record: no reaper will send it, and there is nothing to confirm.
		r.endResult(body, status, true)
	case time.Now().After(leases.SendBy(markSent)):
		// Held up (a pause) past the mark's send-by time: a reaper takes the
		// mark over and sends the event; sending it too would send it twice.
		r.log().Warn("too late to send the result event under the mark; a reaper sends it")
		r.endResult(body, status, false)
	default:
		if r.endResult(body, status, true) {
			r.confirmSent(ctx)
		}
	}
}

// confirmSent tells the fleet that this worker sent the result event, so
// that no reaper sends it again. One that never gets through leaves the mark
// to a reaper, and the submitter may get the event twice (clients keep the
// first).
func (r *run) confirmSent(ctx context.Context) {
	err := retry.For(ctx, markBudget, func() error {
		_, err := r.w.store.ConfirmSent(ctx, r.attempt.SessionKey, r.attempt.AttemptID, r.lease.Fence())
		return err
	})
	if err != nil {
		r.log().Warn("the result event's sending not confirmed; a reaper sends it again: " + err.Error())
	}
}

// markBudget is how long a worker retries marking a published result, and
// confirming that it sent the result event. Any length is safe (the first
// marker sends the result event, within its send window); past it the
// reaper takes over.
const markBudget = 10 * time.Second

// deliverUnrecorded publishes a result that has no record (Redis lost it):
// the durable stream alone decides which result stands.
func (r *run) deliverUnrecorded(ctx context.Context, body []byte, status teamster.Status) {
	if r.publishDurable(ctx, body) {
		r.endResult(body, status, true)
	}
}

// publishDurable stores the result on teamster.result.<attemptId>, retrying
// for a while; it reports whether body is the attempt's durable result.
func (r *run) publishDurable(ctx context.Context, body []byte) bool {
	err := retry.For(ctx, time.Minute, func() error {
		err := bus.PublishResultBody(ctx, r.w.js, r.attempt.AttemptID, body)
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

// endResult counts the run as finished by this worker with status, drops
// its subjects and, when send is set, sends the result event, the last event
// of the run. It reports whether it sent the event (a nil body counts and
// sends nothing).
func (r *run) endResult(body []byte, status teamster.Status, send bool) bool {
	r.w.m.Finished.WithLabelValues(r.harnessID, string(status)).Inc()
	r.w.m.RunDuration.WithLabelValues(r.harnessID).Observe(time.Since(r.started).Seconds())
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return false
	}
	r.ended = true
	// Unsubscribe first: the UNSUBs reach the server before the result
	// event, so a cancel or inject sent by someone who saw the result finds
	// no run (no_active_run) instead of a subscription about to go.
	r.unsubscribeLocked()
	if !send || body == nil {
		return false
	}
	r.seq++
	return r.publishEvent(r.seq, bus.EventResult, body) == nil
}

// publishOrphan answers an attempt that cannot be run and has no record.
func (w *Worker) publishOrphan(ctx context.Context, a *bus.Attempt, harnessID string, e *teamster.Error) {
	res := bus.NewErrorResult(a.AttemptID, e)
	res.HarnessID, res.WorkerID = harnessID, w.id
	body, err := bus.Encode(res)
	if err != nil {
		return
	}
	if err := bus.PublishResultBody(ctx, w.js, a.AttemptID, body); err != nil {
		return
	}
	if a.ReplyTo != "" {
		_ = bus.SendEvent(w.nc, a.ReplyTo, &bus.Event{V: bus.Version, AttemptID: a.AttemptID, Seq: 1, Type: bus.EventResult, Data: body})
	}
}
