package harness

import (
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// LifecyclePhase is one phase of an attempt's lifecycle.
type LifecyclePhase string

// The phases, in the order a run passes them. Each is emitted at most once.
// Exactly one of the terminal phases (completed, failed, cancelled) ends the
// lifecycle; after it nothing more is emitted.
//
//	started ─▶ first-output ─▶ settling ─▶ completed | failed | cancelled
//
// A run may skip any non-terminal phase (a turn without output has no
// first-output) or end from any of them.
const (
	// PhaseStarted: the harness began the native turn.
	PhaseStarted LifecyclePhase = "started"
	// PhaseFirstOutput: the turn produced its first output (text, reasoning
	// or a tool call).
	PhaseFirstOutput LifecyclePhase = "first-output"
	// PhaseSettling: the native turn ended and the harness is settling it
	// (DeadlineController.BeginSettlement).
	PhaseSettling LifecyclePhase = "settling"
	// PhaseCompleted: the turn completed with an outcome.
	PhaseCompleted LifecyclePhase = "completed"
	// PhaseFailed: the turn ended with an error.
	PhaseFailed LifecyclePhase = "failed"
	// PhaseCancelled: the turn was cancelled (cancelled, drain_timeout,
	// lease_lost, deadline_exceeded).
	PhaseCancelled LifecyclePhase = "cancelled"
)

// Terminal reports whether p ends the lifecycle.
func (p LifecyclePhase) Terminal() bool {
	return p == PhaseCompleted || p == PhaseFailed || p == PhaseCancelled
}

// Valid reports whether p is one of the phases.
func (p LifecyclePhase) Valid() bool {
	switch p {
	case PhaseStarted, PhaseFirstOutput, PhaseSettling, PhaseCompleted, PhaseFailed, PhaseCancelled:
		return true
	}
	return false
}

// LifecycleEvent is one emitted phase.
type LifecycleEvent struct {
	Phase LifecyclePhase
	// At is when the phase was emitted, on the lifecycle's clock.
	At time.Time
	// Err is why the run failed or was cancelled; nil for other phases.
	Err error
}

// LifecycleObserver receives lifecycle events. An error it returns, or a
// panic, is isolated: reported to LifecycleOptions.OnObserverError and
// otherwise ignored.
type LifecycleObserver func(LifecycleEvent) error

// LifecycleOptions configure a Lifecycle.
type LifecycleOptions struct {
	// Clock stamps events; nil is the real clock.
	Clock clockwork.Clock
	// OnObserverError, when set, hears of every observer that returned an
	// error or panicked. A panic in it is recovered and dropped.
	OnObserverError func(ev LifecycleEvent, err error)
}

// Lifecycle gates an attempt's lifecycle events, the Go form of OpenClaw's
// createAgentHarnessAttemptLifecycle with emitAgentHarnessAttemptEvent's
// observer isolation: each phase is emitted at most once, nothing after the
// first terminal phase, and no observer can break the run or another
// observer.
//
// Events reach observers one at a time, in the order their Emit calls
// claimed them. When Emit is called while another goroutine (or an observer,
// re-entrantly) is delivering, the event is queued and delivered by that
// goroutine; Emit then returns before observers saw it. Every event is
// delivered before the last concurrent Emit returns.
type Lifecycle struct {
	clock clockwork.Clock
	onErr func(LifecycleEvent, error)

	mu         sync.Mutex
	observers  []LifecycleObserver
	emitted    map[LifecyclePhase]bool
	terminal   LifecyclePhase
	queue      []LifecycleEvent
	delivering bool
}

// NewLifecycle returns a lifecycle with no phase emitted.
func NewLifecycle(o LifecycleOptions) *Lifecycle {
	clock := o.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Lifecycle{clock: clock, onErr: o.OnObserverError, emitted: map[LifecyclePhase]bool{}}
}

// Observe registers an observer for the events emitted from now on. A nil
// observer is ignored.
func (l *Lifecycle) Observe(o LifecycleObserver) {
	if o == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.observers = append(l.observers, o)
}

// Emit emits phase with err (kept only for failed and cancelled) and reports
// whether it did: false for an unknown phase, a phase emitted before, and
// any phase after a terminal one.
func (l *Lifecycle) Emit(phase LifecyclePhase, err error) bool {
	if !phase.Valid() {
		return false
	}
	if phase != PhaseFailed && phase != PhaseCancelled {
		err = nil
	}
	l.mu.Lock()
	if l.emitted[phase] || l.terminal != "" {
		l.mu.Unlock()
		return false
	}
	l.emitted[phase] = true
	if phase.Terminal() {
		l.terminal = phase
	}
	l.queue = append(l.queue, LifecycleEvent{Phase: phase, At: l.clock.Now(), Err: err})
	if l.delivering {
		l.mu.Unlock()
		return true
	}
	l.delivering = true
	for len(l.queue) > 0 {
		ev := l.queue[0]
		l.queue = l.queue[1:]
		obs := l.observers[:len(l.observers):len(l.observers)]
		l.mu.Unlock()
		for _, o := range obs {
			l.notify(o, ev)
		}
		l.mu.Lock()
	}
	l.delivering = false
	l.mu.Unlock()
	return true
}

// Emitted reports whether phase was emitted.
func (l *Lifecycle) Emitted(phase LifecyclePhase) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.emitted[phase]
}

// Terminal returns the terminal phase emitted, and false before one was.
func (l *Lifecycle) Terminal() (LifecyclePhase, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terminal, l.terminal != ""
}

// notify calls one observer, isolating its error or panic.
func (l *Lifecycle) notify(o LifecycleObserver, ev LifecycleEvent) {
	defer func() {
		if p := recover(); p != nil {
			l.report(ev, fmt.Errorf("lifecycle observer panicked on %s: %v", ev.Phase, p))
		}
	}()
	if err := o(ev); err != nil {
		l.report(ev, err)
	}
}

func (l *Lifecycle) report(ev LifecycleEvent, err error) {
	if l.onErr == nil {
		return
	}
	defer func() { _ = recover() }()
	l.onErr(ev, err)
}
