package harness_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness"
)

// phaseLog records the phases an observer saw.
type phaseLog struct {
	mu     sync.Mutex
	phases []harness.LifecyclePhase
	events []harness.LifecycleEvent
}

func (l *phaseLog) observe(ev harness.LifecycleEvent) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phases = append(l.phases, ev.Phase)
	l.events = append(l.events, ev)
	return nil
}

func (l *phaseLog) got() []harness.LifecyclePhase {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]harness.LifecyclePhase(nil), l.phases...)
}

func TestLifecycleEmitsEachPhaseOnce(t *testing.T) {
	type P = harness.LifecyclePhase
	cases := []struct {
		name      string
		emits     []P
		want      []bool
		delivered []P
		terminal  P
	}{
		{"a whole run",
			[]P{harness.PhaseStarted, harness.PhaseFirstOutput, harness.PhaseSettling, harness.PhaseCompleted},
			[]bool{true, true, true, true},
			[]P{harness.PhaseStarted, harness.PhaseFirstOutput, harness.PhaseSettling, harness.PhaseCompleted},
			harness.PhaseCompleted},
		{"repeated phases",
			[]P{harness.PhaseStarted, harness.PhaseStarted, harness.PhaseFirstOutput, harness.PhaseFirstOutput},
			[]bool{true, false, true, false},
			[]P{harness.PhaseStarted, harness.PhaseFirstOutput}, ""},
		{"nothing after a terminal phase",
			[]P{harness.PhaseStarted, harness.PhaseFailed, harness.PhaseCompleted, harness.PhaseCancelled, harness.PhaseFirstOutput},
			[]bool{true, true, false, false, false},
			[]P{harness.PhaseStarted, harness.PhaseFailed}, harness.PhaseFailed},
		{"cancelled without a start",
			[]P{harness.PhaseCancelled, harness.PhaseStarted},
			[]bool{true, false},
			[]P{harness.PhaseCancelled}, harness.PhaseCancelled},
		{"unknown phase",
			[]P{"bogus", harness.PhaseStarted},
			[]bool{false, true},
			[]P{harness.PhaseStarted}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := harness.NewLifecycle(harness.LifecycleOptions{Clock: clockwork.NewFakeClockAt(t0)})
			var log phaseLog
			l.Observe(log.observe)
			l.Observe(nil)
			var got []bool
			for _, p := range tc.emits {
				got = append(got, l.Emit(p, nil))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("Emit results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.delivered, log.got()); diff != "" {
				t.Fatalf("delivered phases (-want +got):\n%s", diff)
			}
			term, ok := l.Terminal()
			if term != tc.terminal || ok != (tc.terminal != "") {
				t.Fatalf("Terminal() = %q, %v; want %q", term, ok, tc.terminal)
			}
			for _, p := range tc.delivered {
				if !l.Emitted(p) {
					t.Fatalf("Emitted(%s) is false", p)
				}
			}
		})
	}
}

func TestLifecycleEventFields(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	l := harness.NewLifecycle(harness.LifecycleOptions{Clock: fc})
	var log phaseLog
	l.Observe(log.observe)
	boom := teamster.Errorf(teamster.CodeHarnessFailed, "boom")
	l.Emit(harness.PhaseStarted, boom) // an error on a non-failure phase is dropped
	fc.Advance(3)
	l.Emit(harness.PhaseFailed, boom)
	want := []harness.LifecycleEvent{
		{Phase: harness.PhaseStarted, At: t0},
		{Phase: harness.PhaseFailed, At: t0.Add(3), Err: boom},
	}
	if diff := cmp.Diff(want, log.events, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestLifecycleConcurrentEmits(t *testing.T) {
	phases := []harness.LifecyclePhase{
		harness.PhaseStarted, harness.PhaseFirstOutput, harness.PhaseSettling,
		harness.PhaseCompleted, harness.PhaseFailed, harness.PhaseCancelled,
	}
	for round := range 50 {
		l := harness.NewLifecycle(harness.LifecycleOptions{})
		var a, b phaseLog
		var inside, overlaps atomic.Int32
		serial := func(ev harness.LifecycleEvent) error {
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer inside.Add(-1)
			return a.observe(ev)
		}
		l.Observe(serial)
		l.Observe(b.observe)
		var emitted atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range phases {
					if l.Emit(phases[(g+i+round)%len(phases)], nil) {
						emitted.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		got := a.got()
		if diff := cmp.Diff(got, b.got()); diff != "" {
			t.Fatalf("round %d: observers saw different sequences (-a +b):\n%s", round, diff)
		}
		if overlaps.Load() != 0 {
			t.Fatalf("round %d: an observer was called concurrently", round)
		}
		if int(emitted.Load()) != len(got) {
			t.Fatalf("round %d: %d Emit calls returned true, %d events delivered", round, emitted.Load(), len(got))
		}
		seen := map[harness.LifecyclePhase]bool{}
		for i, p := range got {
			if seen[p] {
				t.Fatalf("round %d: %s delivered twice: %v", round, p, got)
			}
			seen[p] = true
			if p.Terminal() && i != len(got)-1 {
				t.Fatalf("round %d: events after the terminal %s: %v", round, p, got)
			}
		}
		if len(got) == 0 || !got[len(got)-1].Terminal() {
			t.Fatalf("round %d: no terminal phase delivered: %v", round, got)
		}
	}
}

func TestLifecycleIsolatesObservers(t *testing.T) {
	var mu sync.Mutex
	var failures []string
	l := harness.NewLifecycle(harness.LifecycleOptions{
		OnObserverError: func(ev harness.LifecycleEvent, err error) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf("%s: %v", ev.Phase, err))
			mu.Unlock()
			panic("the error hook fails too")
		},
	})
	var first, last phaseLog
	l.Observe(first.observe)
	l.Observe(func(harness.LifecycleEvent) error { panic("observer bug") })
	l.Observe(func(harness.LifecycleEvent) error { return errors.New("observer refused") })
	l.Observe(last.observe)

	for _, p := range []harness.LifecyclePhase{harness.PhaseStarted, harness.PhaseCompleted} {
		if !l.Emit(p, nil) {
			t.Fatalf("Emit(%s) = false", p)
		}
	}
	want := []harness.LifecyclePhase{harness.PhaseStarted, harness.PhaseCompleted}
	for name, log := range map[string]*phaseLog{"first": &first, "last": &last} {
		if diff := cmp.Diff(want, log.got()); diff != "" {
			t.Errorf("%s observer (-want +got):\n%s", name, diff)
		}
	}
	wantFailures := []string{
		"started: lifecycle observer panicked on started: observer bug",
		"started: observer refused",
		"completed: lifecycle observer panicked on completed: observer bug",
		"completed: observer refused",
	}
	if diff := cmp.Diff(wantFailures, failures); diff != "" {
		t.Fatalf("reported failures (-want +got):\n%s", diff)
	}
}

func TestLifecycleReentrantEmit(t *testing.T) {
	l := harness.NewLifecycle(harness.LifecycleOptions{})
	var log phaseLog
	l.Observe(func(ev harness.LifecycleEvent) error {
		if ev.Phase == harness.PhaseStarted {
			// An observer may emit: the event follows the current one.
			l.Emit(harness.PhaseCompleted, nil)
			l.Emit(harness.PhaseFailed, nil)
		}
		return nil
	})
	l.Observe(log.observe)
	l.Emit(harness.PhaseStarted, nil)
	want := []harness.LifecyclePhase{harness.PhaseStarted, harness.PhaseCompleted}
	if diff := cmp.Diff(want, log.got()); diff != "" {
		t.Fatalf("delivered (-want +got):\n%s", diff)
	}
}
