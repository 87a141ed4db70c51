package codex

import (
	"context"
	"errors"
	"sync"

	"github.com/teamster-fleet/teamster"
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

// steerer writes steers for one turn.
type steerer struct {
	t  *turn
	mu sync.Mutex // one steer at a time, in admission order
}

// steerV2 is the injection.V2 handle of a run whose manifest says "v2".
type steerV2 struct{ steerer }

var _ injection.V2 = (*steerV2)(nil)

// QueueMessage steers the turn with text; see the package's injection notes.
// A missing assertion counts as false.
func (h *steerV2) QueueMessage(text string, opts injection.QueueOptions, assertCurrent injection.AssertFunc, kind injection.Kind) error {
	refused, invalid := kind.Refusal("codex")
	if invalid != nil {
		injection.Refuse(opts)
		return invalid
	}
	if assertCurrent == nil {
		assertCurrent = func() bool { return false }
	}
	return h.steer(text, opts, assertCurrent, refused)
}

// steerV1 is the injection.V1 handle of a run whose manifest says "v1": it
// steers ordinary input with the run's own check only.
type steerV1 struct{ steerer }

var _ injection.V1 = (*steerV1)(nil)

// QueueMessage steers the turn with text.
func (h *steerV1) QueueMessage(text string, opts injection.QueueOptions) error {
	return h.steer(text, opts, nil, teamster.Errorf(teamster.CodeNoActiveRun, "codex: the run no longer accepts this input"))
}

// steer writes one turn/steer. assertCurrent (nil for V1) is called last,
// immediately before the write.
func (s *steerer) steer(text string, opts injection.QueueOptions, assertCurrent injection.AssertFunc, refused *teamster.Error) error {
	t := s.t
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.ended.Load() {
		injection.Refuse(opts)
		return noActiveRun()
	}
	guardSaidNo := ""
	guard := func() bool {
		if t.ended.Load() {
			guardSaidNo = "run"
			return false
		}
		if assertCurrent != nil && !assertCurrent() {
			guardSaidNo = "assertion"
			return false
		}
		return true
	}
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
		injection.Refuse(opts)
		if guardSaidNo == "run" {
			return noActiveRun()
		}
		return refused
	case errors.Is(err, errConnClosed):
		injection.Refuse(opts)
		return noActiveRun()
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

func noActiveRun() *teamster.Error {
	return teamster.Errorf(teamster.CodeNoActiveRun, "codex: the turn has ended")
}
