package nativecli

import (
	"context"
	"errors"

	"github.com/teamster-fleet/teamster"
)

// Errors makes a harness's attempt errors; each message starts with the
// prefix the value holds ("codex: ").
type Errors string

// FailedNone is a harness_failed error for an attempt that did nothing.
func (e Errors) FailedNone(format string, args ...any) *teamster.Error {
	return teamster.Errorf(teamster.CodeHarnessFailed, string(e)+format, args...).WithSideEffects(teamster.SideEffectsNone)
}

// Failed is a harness_failed error for an attempt that may have done
// something.
func (e Errors) Failed(format string, args ...any) *teamster.Error {
	return teamster.Errorf(teamster.CodeHarnessFailed, string(e)+format, args...).WithSideEffects(teamster.SideEffectsPossible)
}

// Ctx is the attempt's error once ctx is done: its cause when that is a
// *teamster.Error (cancelled, lease_lost, drain_timeout, deadline_exceeded),
// else deadline_exceeded or cancelled.
func (e Errors) Ctx(ctx context.Context) error {
	var te *teamster.Error
	if errors.As(context.Cause(ctx), &te) && te != nil {
		return te
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return teamster.Errorf(teamster.CodeDeadlineExceeded, "%sthe attempt's deadline passed", string(e))
	}
	return teamster.Errorf(teamster.CodeCancelled, "%sthe attempt was cancelled", string(e))
}

// Host is the attempt's error after a failed host callback: the host's
// *teamster.Error, else harness_failed.
func (e Errors) Host(call string, err error) *teamster.Error {
	var te *teamster.Error
	if errors.As(err, &te) && te != nil {
		return te
	}
	return e.Failed("host %s: %v", call, err)
}
