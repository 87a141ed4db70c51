package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/delegation"
	"github.com/teamster-fleet/teamster/harness"

	"github.com/teamster-fleet/teamster/selection"
)

// Phase 2 of a run, prepare: the checks under the lease, before the harness
// starts. The claim read the session record under the new lease (run.session);
// this phase is the one that reads it, for the delegation check and the
// native binding it hands to the turn. A refusal here finishes the run with
// sideEffects none: the harness never ran.

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
	if err := r.checkFinalizer(); err != nil {
		r.finish(r.errorResult(err))
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
	if err := r.restoreState(binding); err != nil {
		r.finish(r.errorResult(teamster.AsError(err)))
		return nil, false
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
func (r *run) checkDelegate(rec *teamster.SessionRecord) error {
	var pinned selection.Manifest
	if rec != nil {
		if h, ok := r.w.harnesses[rec.AgentHarnessID]; ok {
			pinned = h.impl.Manifest()
		}
	}
	return delegation.Check(r.attempt.DelegationRequest(r.delegate), rec, pinned)
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
