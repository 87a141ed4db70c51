package claude

import (
	"errors"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
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

// newSteerer is the turn's injection side: its handles write each item with
// steer, one at a time.
func (t *turn) newSteerer() *nativecli.Steerer {
	return nativecli.NewSteerer("claude", &t.ended, t.steer)
}

// steer writes one user line; guard (the run's own check, then the host's
// assertion) is called under the process's write lock, immediately before
// the write.
func (t *turn) steer(text string, opts injection.QueueOptions, guard func() bool) error {
	uuid := newUUID()
	st := injection.NewSettler(opts)
	register := func() bool {
		if !guard() {
			return false
		}
		// Registered before the write: the turn does not end while a
		// written line has not been taken in.
		t.mu.Lock()
		t.cmds[uuid] = &command{settler: st}
		t.mu.Unlock()
		return true
	}
	err := t.p.write(newUserLine(uuid, text, "next"), register)
	switch {
	case err == nil:
		st.Accept()
		t.log.WithField("command", uuid).Debug("claude: steer written")
		return nil
	case errors.Is(err, errRefused):
		return err // nothing written: the steerer refuses the item
	default:
		// Not written (stdin closed, or the pipe broke: the process is
		// gone and nothing of the line was taken in).
		t.mu.Lock()
		delete(t.cmds, uuid)
		t.mu.Unlock()
		injection.Refuse(opts)
		t.log.WithError(err).Info("claude: a steer could not be written")
		return errs.Ended()
	}
}
