package worker

import (
	"io"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/metrics"
)

// Every lifecycle change goes through transition, which keeps to the
// diagram's edges: a move that is not one is refused (the state stays),
// staying is no move, and the state metric follows each move.
func TestTransitionKeepsToTheDiagram(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	w := &Worker{log: log, m: metrics.NewWorker(nil), life: newLifecycle()}
	to := func(s state) func(state) state { return func(state) state { return s } }
	gauge := func(s string) float64 {
		var m dto.Metric
		if err := w.m.State.WithLabelValues(s).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}

	if from, got := w.transition(to(stateActive)); from != stateNew || got != stateNew {
		t.Fatalf("new → active: %s → %s, want refused (no such edge)", from.name(), got.name())
	}
	walk := []state{stateStarting, stateActive, stateDraining, stateActive, stateStopping, stateStopped}
	for _, s := range walk {
		before := w.state()
		if from, got := w.transition(to(s)); from != before || got != s {
			t.Fatalf("%s → %s: got %s → %s", before.name(), s.name(), from.name(), got.name())
		}
		if v := gauge(s.String()); v != 1 {
			t.Fatalf("after %s the %s gauge is %v, want 1", s.name(), s.String(), v)
		}
	}
	for _, s := range []state{stateNew, stateStarting, stateActive, stateDraining, stateStopping} {
		if _, got := w.transition(to(s)); got != stateStopped {
			t.Fatalf("stopped → %s moved to %s; stopped is final", s.name(), got.name())
		}
	}
	if gauge(bus.WorkerStopped) != 1 || gauge(bus.WorkerActive) != 0 {
		t.Fatal("the state gauge does not show stopped alone")
	}
}

// The fleet sees four states: new and starting are "starting", draining and
// stopping are "draining".
func TestStatesAsTheFleetSeesThem(t *testing.T) {
	want := map[state]string{stateNew: bus.WorkerStarting, stateStarting: bus.WorkerStarting, stateActive: bus.WorkerActive,
		stateDraining: bus.WorkerDraining, stateStopping: bus.WorkerDraining, stateStopped: bus.WorkerStopped}
	for s, str := range want {
		if s.String() != str {
			t.Errorf("%s shows as %q, want %q", s.name(), s.String(), str)
		}
	}
}

// A run's step only moves forward, and a step is entered once: the finish
// runs once, whoever asks first.
func TestARunStepOnlyMovesForward(t *testing.T) {
	var r run
	if !r.advance(stepTurn) || r.at() != stepTurn {
		t.Fatal("prepare → turn refused")
	}
	if !r.advance(stepFinish) {
		t.Fatal("turn → finish refused")
	}
	if r.advance(stepFinish) {
		t.Fatal("a second finish was let in")
	}
	if r.advance(stepTurn) || r.at() != stepFinish {
		t.Fatalf("moved back to %d", r.at())
	}
	if !r.advance(stepRetired) || r.advance(stepDeliver) {
		t.Fatal("retirement is not the last step")
	}
}
