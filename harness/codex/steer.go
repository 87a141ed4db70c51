package codex

import (
	"context"
	"errors"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
	"github.com/teamster-fleet/teamster/injection"
)

// Injection steers the running turn: turn/steer with expectedTurnId, which
// the app-server refuses unless that turn is the one running. An accepted
// steer reaches the model's next request (a request in flight is abandoned
// and sent again with the new input).
//
// Each item is written on its own, in admission order (one at a time per
// run), and settled exactly once when its write resolves:
//   - the run's own check (the turn is still running) and then the host's
//     assertion are called after the request is fully prepared and
//     immediately before it is written; a false one writes nothing: the item
//     is refused (rejected; no_active_run, or source_revoked for
//     source-bound input);
//   - the app-server answered: committed;
//   - the app-server refused it (the turn ended meanwhile, or another turn
//     runs): rejected, and the refusal is returned;
//   - no answer (the process died, or none within callTimeout): the item
//     was written and may have reached the turn, so it is admitted and
//     settled unconfirmed, never written again.
//
// Images of injected input are not forwarded (the worker's inject requests
// carry no image the app-server could fetch).

// newSteerer is the turn's injection side: its handles write each item with
// steer, one at a time.
func (t *turn) newSteerer() *nativecli.Steerer {
	return nativecli.NewSteerer("codex", &t.ended, t.steer)
}

// steer writes one turn/steer; guard (the run's own check, then the host's
// assertion) is called immediately before the write.
func (t *turn) steer(text string, opts injection.QueueOptions, guard func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := t.c.callGuarded(ctx, methodTurnSteer, turnSteerParams{
		ThreadID: t.threadID, ExpectedTurnID: t.turnID, Input: textInput(text),
	}, guard)
	var re *rpcError
	switch {
	case err == nil:
		st := injection.NewSettler(opts)
		st.Accept()
		st.Settle(injection.Committed)
		t.log.Debug("codex: steer committed")
		return nil
	case errors.Is(err, errGuardRefused):
		return err // nothing written: the steerer refuses the item
	case errors.Is(err, errConnClosed):
		injection.Refuse(opts)
		return errs.Ended()
	case errors.As(err, &re):
		injection.Refuse(opts)
		t.log.WithField("reason", re.Message).Info("codex: the app-server refused a steer")
		return teamster.Errorf(teamster.CodeNoActiveRun, "codex: the app-server refused the steer: %s", re.Message)
	default:
		// Written, outcome unknown: admitted, never written again.
		st := injection.NewSettler(opts)
		st.Accept()
		st.Settle(injection.Unconfirmed)
		t.log.WithError(err).Warn("codex: a steer got no answer; it is settled unconfirmed")
		return nil
	}
}
