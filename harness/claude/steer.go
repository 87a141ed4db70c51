package claude

import (
	"errors"
	"sync"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/injection"
)

// Injection writes each item to the running CLI's stdin as a stream-json
// user line with priority "next": the CLI queues it (command_lifecycle
// "queued") and takes it into the running turn at its next model request
// (after the tool results of the response in flight, which is not
// abandoned), or, when the model is already writing its final answer, runs
// it as a queued pass right after that answer, in the same process and the
// same attempt (command_lifecycle "started" either way).
//
// The write is the final dispatch point: the harness keeps no queue of its
// own, and once a line is on the CLI's stdin nothing the harness does can
// take it back (closing stdin does not drop what was written; the CLI reads
// it and runs it before it exits). So the handle is V2: the run's own check
// (the turn still takes input) and then the host's assertion are called
// under the process's write lock, immediately before the write; a false one
// writes nothing.
//
// Each item is written on its own, in admission order (one at a time per
// run), and settled exactly once:
//   - a check said no: nothing written, rejected (no_active_run, or
//     source_revoked for source-bound input);
//   - the write failed (stdin closed, the process gone): nothing reached the
//     CLI, rejected;
//   - written: admitted (accepted); then committed when the CLI reports the
//     line "started" (taken into the conversation), cancelled when it
//     reports it "cancelled" without starting it (an interrupt dropped the
//     queued line), and unconfirmed when the turn ends without either (the
//     process died or was killed after the write): it may have reached the
//     model and is never written again.
//
// Images of injected input are not forwarded.

// steerer writes steers for one turn.
type steerer struct {
	t  *turn
	mu sync.Mutex // one steer at a time, in admission order
}

// steerV2 is the injection.V2 handle of a run whose manifest says "v2".
type steerV2 struct{ steerer }

var _ injection.V2 = (*steerV2)(nil)

// QueueMessage steers the turn with text. A missing assertion counts as
// false.
func (h *steerV2) QueueMessage(text string, opts injection.QueueOptions, assertCurrent injection.AssertFunc, kind injection.Kind) error {
	refused, invalid := kind.Refusal("claude")
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
	return h.steer(text, opts, nil, teamster.Errorf(teamster.CodeNoActiveRun, "claude: the run no longer accepts this input"))
}

// steer writes one user line. assertCurrent (nil for V1) is called last,
// immediately before the write.
func (s *steerer) steer(text string, opts injection.QueueOptions, assertCurrent injection.AssertFunc, refused *teamster.Error) error {
	t := s.t
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.ended.Load() {
		injection.Refuse(opts)
		return noActiveRun()
	}
	uuid := newUUID()
	st := injection.NewSettler(opts)
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
		// Registered before the write: the turn does not end while a
		// written line has not been taken in.
		t.mu.Lock()
		t.cmds[uuid] = &command{settler: st}
		t.mu.Unlock()
		return true
	}
	err := t.p.write(newUserLine(uuid, text, "next"), guard)
	switch {
	case err == nil:
		st.Accept()
		t.log.WithField("command", uuid).Debug("claude: steer written")
		return nil
	case errors.Is(err, errRefused):
		injection.Refuse(opts)
		if guardSaidNo == "run" {
			return noActiveRun()
		}
		return refused
	default:
		// Not written (stdin closed, or the pipe broke: the process is
		// gone and nothing of the line was taken in).
		t.mu.Lock()
		delete(t.cmds, uuid)
		t.mu.Unlock()
		injection.Refuse(opts)
		t.log.WithError(err).Info("claude: a steer could not be written")
		return noActiveRun()
	}
}

func noActiveRun() *teamster.Error {
	return teamster.Errorf(teamster.CodeNoActiveRun, "claude: the turn has ended")
}
