package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/leases"
)

// Native state that follows the session (bus/nativestate.go): a harness that
// keeps what it needs to resume a thread on local disk (a
// harness.StateCarrier) has that state restored before each turn from the
// object the session record names, and saved after each successful turn to
// a new object whose name carries the turn's fence; the fenced finish writes
// the new name into the record (finishTurn), so only a committed turn's state
// is ever restored.

// stateTimeout bounds one save, restore or delete of native state.
const stateTimeout = 30 * time.Second

// restoreState installs the session's saved native state, before the turn,
// when the record names some and the harness carries state. A record that
// names state the store does not hold, or that cannot be read, fails the
// turn before it starts: the harness would otherwise start a new thread, or
// resume a stale one, without a word.
func (r *run) restoreState(binding json.RawMessage) error {
	sc, ok := r.h.impl.(harness.StateCarrier)
	if !ok || r.session == nil || r.session.NativeState == "" || len(binding) == 0 {
		return nil
	}
	name := r.session.NativeState
	ctx, cancel := context.WithTimeout(r.ctx, stateTimeout)
	defer cancel()
	blob, err := r.w.nativeState.Get(ctx, name, r.w.cfg.MaxNativeState())
	if err != nil {
		why := "could not be read"
		if errors.Is(err, bus.ErrStateMissing) {
			why = "is missing from the object store " + bus.BucketNativeState
		}
		return teamster.Errorf(teamster.CodeHarnessFailed, "the session's native state %s %s, so its thread cannot be resumed here: %v", name, why, err).
			WithSideEffects(teamster.SideEffectsNone)
	}
	if err := sc.ImportState(ctx, binding, blob); err != nil {
		return teamster.Errorf(teamster.CodeHarnessFailed, "the session's native state %s could not be installed: %v", name, err).
			WithSideEffects(teamster.SideEffectsNone)
	}
	return nil
}

// saveState saves the native state of a successful turn's binding and
// returns the object's name ("" when the harness keeps no state for it). It
// saves nothing once the lease is not current: the finish would not commit
// it.
func (r *run) saveState(out *harness.Outcome) (string, error) {
	sc, ok := r.h.impl.(harness.StateCarrier)
	if !ok || len(out.NativeSession) == 0 || string(out.NativeSession) == "null" || !r.lease.Current() {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), stateTimeout)
	defer cancel()
	blob, err := sc.ExportState(ctx, out.NativeSession)
	if err != nil {
		return "", r.stateNotSaved(err)
	}
	if blob == nil {
		return "", nil
	}
	if max := r.w.cfg.MaxNativeState(); int64(len(blob)) > max {
		return "", r.stateNotSaved(fmt.Errorf("native state of %d bytes exceeds the limit of %d bytes (the worker's maxNativeStateBytes)", len(blob), max))
	}
	name := bus.StateObjectName(leases.Tag(r.attempt.ScopedSessionKey()), r.lease.Fence())
	if err := r.w.nativeState.Put(ctx, name, blob); err != nil {
		return "", r.stateNotSaved(err)
	}
	return name, nil
}

// stateNotSaved is the error of a turn that ran but whose native state could
// not be saved: the record keeps the binding and state of the turn before,
// which any worker can still resume.
func (r *run) stateNotSaved(err error) error {
	return teamster.Errorf(teamster.CodeHarnessFailed,
		"the turn ran, but its native state could not be saved, so the session keeps its previous binding: %v", err).
		WithSideEffects(teamster.SideEffectsPossible)
}

// dropState deletes a native state object no record names (best effort: an
// object that cannot be deleted stays as an orphan, logged).
func (r *run) dropState(ctx context.Context, name string) {
	if name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	if err := r.w.nativeState.Delete(ctx, name); err != nil {
		r.log().WithField("object", name).Warn("native state object not deleted; it stays as an orphan: " + err.Error())
	}
}
