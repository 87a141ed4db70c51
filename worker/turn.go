package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
)

// Phase 3 of a run, the turn: the harness runs the attempt. While it does,
// it reports events (turn_events.go), calls the host back (turn_host.go)
// and takes injected input (turn_inject.go). This file owns the turn's
// context (the run's, under the attempt's timeout) and the grace watchdog.

// turn runs the harness, in the run's own goroutine, under the attempt's
// deadline and the lease: a lost lease, a cancel, the drain timeout or a
// Stop cancels the run's context with that cause. After the context ends,
// the harness has its grace (the attempt's settlementTimeoutMs) to return; a
// harness that does not is left behind: a watchdog ends the attempt with the
// cause (finish runs once, whoever calls it first), and the slot stays taken
// until the harness returns. Then it finishes the attempt with the
// harness's outcome.
func (r *run) turn(binding json.RawMessage) {
	defer r.retire()
	r.advance(stepTurn)
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
	wd := r.watchGrace(ctx)
	out, err := r.callHarness(ctx, r.harnessRun(ctx, binding))
	wd.stop()
	// Items the harness left unsettled are settled cancelled before the
	// result, so their sender hears of each.
	r.settleLeftovers()
	err = r.harnessError(ctx, out, err)
	cancel()
	if err != nil {
		r.finish(r.errorResult(teamster.AsError(err)))
		return
	}
	state, err := r.saveState(out)
	if err != nil {
		r.finish(r.errorResult(teamster.AsError(err)))
		return
	}
	r.stageReplyMedia(out)
	r.finishTurn(r.okResult(out), state)
}

// turnContext is the run's context under the attempt's timeout.
func (r *run) turnContext() (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(r.ctx, r.attempt.Timeout(),
		teamster.Errorf(teamster.CodeDeadlineExceeded, "the attempt ran past its timeout of %s", r.attempt.Timeout()))
}

// harnessRun is what the harness is given to run the attempt.
func (r *run) harnessRun(ctx context.Context, binding json.RawMessage) *harness.Run {
	var h harness.Host = (*host)(r)
	if r.finalization() {
		h = finalHost{(*host)(r)}
	}
	hr := &harness.Run{Attempt: r.attempt, Host: h, WorkerID: r.w.id, Fence: r.lease.Fence(),
		Delegate: r.delegate, Binding: binding, Current: func() bool { return ctx.Err() == nil && r.lease.Current() }}
	hr.OnInjector(r.setInjector)
	return hr
}

// graceWatchdog ends the attempt without the harness when the harness has
// not returned within its grace (the attempt's settlementTimeoutMs) after
// the run's context ended.
type graceWatchdog struct {
	stopWatch func() bool
	mu        sync.Mutex
	timer     *time.Timer
}

func (r *run) watchGrace(ctx context.Context) *graceWatchdog {
	wd := &graceWatchdog{}
	wd.stopWatch = context.AfterFunc(ctx, func() {
		wd.mu.Lock()
		defer wd.mu.Unlock()
		wd.timer = time.AfterFunc(r.attempt.SettlementTimeout(), func() {
			r.log().Error("the harness did not return within its grace (settlementTimeoutMs) after cancellation; ending the attempt without it")
			r.settleLeftovers()
			r.finish(r.errorResult(teamster.AsError(context.Cause(ctx))))
		})
	})
	return wd
}

func (wd *graceWatchdog) stop() {
	wd.stopWatch()
	wd.mu.Lock()
	if wd.timer != nil {
		wd.timer.Stop()
	}
	wd.mu.Unlock()
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
	if f, ok := r.h.impl.(harness.Finalizer); ok && r.finalization() {
		return f.FinalizeSettledTurn(ctx, hr)
	}
	return r.h.impl.RunAttempt(ctx, hr)
}

// baseResult, okResult and errorResult build the run's result, for every
// phase that ends the run: the turn, a refusal under the lease, the finish.
func (r *run) baseResult() *bus.Result {
	return &bus.Result{V: bus.Version, AttemptID: r.attempt.AttemptID, HarnessID: r.harnessID, WorkerID: r.w.id,
		Fence: r.lease.Fence(), AssistantTexts: []string{}, Usage: bus.Usage{OutputTokens: r.usage.total()}}
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
