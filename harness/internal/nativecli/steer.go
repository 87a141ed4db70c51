package nativecli

import (
	"sync"
	"sync/atomic"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/injection"
	"github.com/teamster-fleet/teamster/selection"
)

// Ended is the no_active_run error of input that reaches a turn that has
// ended.
func (e Errors) Ended() *teamster.Error {
	return teamster.Errorf(teamster.CodeNoActiveRun, "%sthe turn has ended", string(e))
}

// WriteFunc writes one injected item to the CLI and settles it. It calls
// guard (the run's own check, then the host's assertion) once the write is
// fully prepared and immediately before writing; when guard says no it
// writes and settles nothing (the Steerer refuses the item, whatever the
// WriteFunc returns). Otherwise it returns what QueueMessage returns.
type WriteFunc func(text string, opts injection.QueueOptions, guard func() bool) error

// Steerer is the injection side of a turn: it makes the run's V1 or V2
// handle, which writes each item on its own, in admission order (one at a
// time per run), through the harness's WriteFunc. An item that reaches a
// turn that has ended, or whose checks say no, is refused (rejected;
// no_active_run, or source_revoked for source-bound input).
type Steerer struct {
	name  string // the harness's name, "codex"
	errs  Errors
	ended *atomic.Bool
	write WriteFunc
	mu    sync.Mutex // one item at a time, in admission order
}

// NewSteerer returns the steerer of a turn of the harness name ("codex"),
// which takes no more input once ended is set.
func NewSteerer(name string, ended *atomic.Bool, write WriteFunc) *Steerer {
	return &Steerer{name: name, errs: Errors(name + ": "), ended: ended, write: write}
}

// Install installs on run the handle of the manifest's injection level: V2
// (the host's assertion is checked before each write), V1, or none.
func (s *Steerer) Install(run *harness.Run, m selection.Manifest) {
	switch m.InjectionLevel() {
	case selection.InjectionV2:
		run.SetInjector(s.V2())
	case selection.InjectionV1:
		run.SetInjector(s.V1())
	}
}

// V2 is the injection.V2 handle.
func (s *Steerer) V2() injection.V2 { return &steerV2{s} }

// V1 is the injection.V1 handle.
func (s *Steerer) V1() injection.V1 { return &steerV1{s} }

// steerV2 is the injection.V2 handle of a run whose manifest says "v2".
type steerV2 struct{ s *Steerer }

var _ injection.V2 = (*steerV2)(nil)

// QueueMessage steers the turn with text. A missing assertion counts as
// false.
func (h *steerV2) QueueMessage(text string, opts injection.QueueOptions, assertCurrent injection.AssertFunc, kind injection.Kind) error {
	refused, invalid := kind.Refusal(h.s.name)
	if invalid != nil {
		injection.Refuse(opts)
		return invalid
	}
	if assertCurrent == nil {
		assertCurrent = func() bool { return false }
	}
	return h.s.steer(text, opts, assertCurrent, refused)
}

// steerV1 is the injection.V1 handle of a run whose manifest says "v1": it
// steers ordinary input with the run's own check only.
type steerV1 struct{ s *Steerer }

var _ injection.V1 = (*steerV1)(nil)

// QueueMessage steers the turn with text.
func (h *steerV1) QueueMessage(text string, opts injection.QueueOptions) error {
	return h.s.steer(text, opts, nil, teamster.Errorf(teamster.CodeNoActiveRun, "%s: the run no longer accepts this input", h.s.name))
}

// steer writes one item. assertCurrent (nil for V1) is called last,
// immediately before the write.
func (s *Steerer) steer(text string, opts injection.QueueOptions, assertCurrent injection.AssertFunc, refused *teamster.Error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() {
		injection.Refuse(opts)
		return s.errs.Ended()
	}
	guardSaidNo := ""
	guard := func() bool {
		if s.ended.Load() {
			guardSaidNo = "run"
			return false
		}
		if assertCurrent != nil && !assertCurrent() {
			guardSaidNo = "assertion"
			return false
		}
		return true
	}
	err := s.write(text, opts, guard)
	switch guardSaidNo {
	case "run":
		injection.Refuse(opts)
		return s.errs.Ended()
	case "assertion":
		injection.Refuse(opts)
		return refused
	}
	return err
}
