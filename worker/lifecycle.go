package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// state is the worker's lifecycle state. Outside the worker (the registry,
// the state metric, control replies, /readyz) it shows as one of the four
// states of docs/PROTOCOL.md ("Drain"), its String; two of them have two
// states inside: new and starting both show as "starting" (Start called or
// not), draining and stopping both show as "draining" (a resume can still
// undo it or not).
//
//	           Start           set up          Drain
//	  new ───────────▶ starting ─────▶ active ─────────▶ draining
//	   │                  │              │  ▲   resume    │
//	   │                  │              │  └─────────────┤
//	   │ Drain, Stop      │ Drain, Stop, │ Stop           │ runs ended, drain
//	   │                  │ Start failed │                │ timeout, or Stop
//	   │                  │              ▼                ▼
//	   │                  │          stopping ◀───────────┘
//	   │                  │              │ runs ended: teardown
//	   ▼                  ▼              ▼
//	stopped ◀─────────────┴──────────────┘
//
// Every change goes through Worker.transition; edges lists the arrows.
// Kill is not a transition: it simulates the process dying, and a dead
// process changes no state.
type state uint8

const (
	stateNew      state = iota // built; Start not called
	stateStarting              // Start is setting up (streams, consumers, scripts, registry)
	stateActive                // fetching and running attempts
	stateDraining              // not fetching; waiting for the runs; resume undoes it
	stateStopping              // not fetching; the stop is decided: no resume
	stateStopped               // torn down; Done is closed
)

// String is the state as the fleet sees it.
func (s state) String() string {
	switch s {
	case stateNew, stateStarting:
		return bus.WorkerStarting
	case stateActive:
		return bus.WorkerActive
	case stateDraining, stateStopping:
		return bus.WorkerDraining
	default:
		return bus.WorkerStopped
	}
}

func (s state) name() string {
	return [...]string{"new", "starting", "active", "draining", "stopping", "stopped"}[s]
}

// edges are the arrows of the diagram above.
var edges = map[state][]state{
	stateNew:      {stateStarting, stateStopped},
	stateStarting: {stateActive, stateStopped},
	stateActive:   {stateDraining, stateStopping},
	stateDraining: {stateActive, stateStopping},
	stateStopping: {stateStopped},
}

var allStates = []string{bus.WorkerStarting, bus.WorkerActive, bus.WorkerDraining, bus.WorkerStopped}

// lifecycle is the worker's lifecycle state and what changes with it.
type lifecycle struct {
	mu    sync.Mutex
	state state
	// drain is the drain in progress (draining, stopping), or the last one.
	drain *drain

	done      chan struct{} // closed once stopped (or killed)
	doneOnce  sync.Once
	teardowns sync.Once
}

func newLifecycle() lifecycle { return lifecycle{done: make(chan struct{})} }

func (l *lifecycle) closeDone() { l.doneOnce.Do(func() { close(l.done) }) }

// drain is one drain: from active to draining (Drain) or stopping (Stop),
// until stopped or resumed.
type drain struct {
	resume  chan struct{} // closed by resume
	resumed bool          // resume undid this drain; under the lifecycle lock
	now     chan struct{} // closed by Stop: cancel the runs without waiting
	nowOnce sync.Once
	ended   chan struct{} // closed when this drain is over (stopped or resumed)
}

func newDrain() *drain {
	return &drain{resume: make(chan struct{}), now: make(chan struct{}), ended: make(chan struct{})}
}

func (d *drain) stopNow() { d.nowOnce.Do(func() { close(d.now) }) }

// transition is the one place where the lifecycle state changes. Under the
// lifecycle lock, next gets the current state and returns the state to move
// to (the same one for none), doing whatever must change with it; the move
// must be one of edges. The state metric follows under the same lock. It
// returns the state found and the state left.
func (w *Worker) transition(next func(from state) state) (from, to state) {
	w.life.mu.Lock()
	defer w.life.mu.Unlock()
	from = w.life.state
	to = next(from)
	if to == from {
		return from, to
	}
	legal := false
	for _, s := range edges[from] {
		legal = legal || s == to
	}
	if !legal {
		// A bug: refuse the move rather than leave the diagram.
		w.log.Errorf("lifecycle: no transition from %s to %s; staying %s", from.name(), to.name(), from.name())
		return from, from
	}
	w.life.state = to
	w.m.SetState(to.String(), allStates)
	return from, to
}

// state is the current lifecycle state.
func (w *Worker) state() state {
	w.life.mu.Lock()
	defer w.life.mu.Unlock()
	return w.life.state
}

// errStopped is returned by Start when the worker was drained or stopped
// before it became active.
var errStopped = errors.New("worker: drained before it became active")

// ErrResumed is returned by Drain when the drain was undone by a resume.
var ErrResumed = errors.New("drain undone by resume")

// Done is closed when the worker has stopped (drained, stopped or killed).
func (w *Worker) Done() <-chan struct{} { return w.life.done }

// Start sets up the streams and consumers, loads the scripts, starts renewing
// leases and heartbeating, and starts fetching. It returns once the worker is
// active.
//
// A Start that fails leaves the worker stopped, with what it had set up
// undone; a Drain or Stop while Start is setting up makes it return an error.
func (w *Worker) Start(ctx context.Context) error {
	from, to := w.transition(func(s state) state {
		if s == stateNew {
			return stateStarting
		}
		return s
	})
	if to != stateStarting || from != stateNew {
		return fmt.Errorf("worker: cannot start a worker that is %s", from)
	}
	if err := w.start(ctx); err != nil {
		w.teardown()
		return err
	}
	return nil
}

// setupBudget is how long a starting worker retries the JetStream setup
// (streams, bucket, consumers) while JetStream does not answer.
const setupBudget = time.Minute

func (w *Worker) start(ctx context.Context) error {
	// Find, never create: routers own JetStream's streams, buckets and
	// consumers (docs/ARCHITECTURE.md, "Security"), and a worker's
	// credentials allow only reading them. A worker started before any
	// router, or a cluster still forming, waits for a while, logged.
	warn := func(err error) { w.log.Warn("JetStream not ready for this worker yet; trying again: " + err.Error()) }
	var kv jetstream.KeyValue
	err := bus.RetryTransient(ctx, setupBudget, warn, func(ctx context.Context) error {
		var err error
		kv, err = bus.Lookup(ctx, w.js)
		return err
	})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.nativeState, err = bus.OpenNativeState(ctx, w.js); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := w.store.Load(ctx); err != nil {
		return fmt.Errorf("worker: redis: %w", err)
	}
	// The entry, still "starting" (no router selects its harnesses yet),
	// tells the routers which consumers to create.
	w.started = time.Now()
	w.registry = newRegistry(registryParams{kv: kv, w: w, log: w.log})
	if err := w.registry.put(ctx); err != nil {
		return fmt.Errorf("worker: registry: %w", err)
	}
	for id, h := range w.harnesses {
		err := bus.RetryTransient(ctx, setupBudget, warn, func(ctx context.Context) error {
			var err error
			h.consumer, err = bus.HarnessConsumer(ctx, w.js, id)
			return err
		})
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	w.keep.Start()
	if err := w.subscribeControl(); err != nil {
		return err
	}
	go w.dispatchRunMsgs()
	if _, to := w.transition(func(s state) state {
		if s == stateStarting {
			return stateActive
		}
		return s
	}); to != stateActive {
		// Drained or stopped while starting: nothing was fetched; Start
		// undoes what it set up.
		return errStopped
	}
	w.registry.start()
	w.registry.kickNow() // advertise "active" now, not at the next heartbeat
	w.startFetching()
	w.log.WithFields(logrus.Fields{"slots": w.cfg.Slots, "harnesses": w.harnessIDs()}).Info("worker active")
	return nil
}

// Drain stops fetching, lets running attempts finish for up to the drain
// timeout (then cancels what remains with drain_timeout), leaves the registry
// and stops. It returns nil when the worker has stopped, ErrResumed when a
// resume undid the drain first; ctx bounds the wait, not the drain. A worker
// that is not active yet (Start not called, or not done) stops at once: it
// has fetched nothing. Draining a worker that is draining or stopping waits
// for that drain.
func (w *Worker) Drain(ctx context.Context) error {
	from, d := w.beginDrain(false)
	switch from {
	case stateNew, stateStarting, stateStopped:
		return nil
	}
	select {
	case <-w.life.done:
		return nil
	case <-d.ended:
		select {
		case <-w.life.done:
			return nil
		default:
			return ErrResumed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop stops the worker without waiting for its runs: it stops fetching,
// cancels every running attempt with drain_timeout at once (each still
// records and publishes its result, and releases its lease), leaves the
// registry and stops, as a drain whose timeout has passed. It does not wait:
// Done is closed once the worker has stopped. A drain in progress is
// stopped the same way, and cannot be resumed any more.
func (w *Worker) Stop() { w.beginDrain(true) }

// beginDrain is the one transition of Drain and Stop. A worker that is new
// or starting stops at once; an active one starts a drain (draining, or with
// stop stopping at once); a drain in progress is joined, and with stop told
// to stop now. It returns the state it found and the drain (nil when there
// is none).
func (w *Worker) beginDrain(stop bool) (state, *drain) {
	var d *drain
	from, _ := w.transition(func(s state) state {
		switch s {
		case stateNew, stateStarting:
			return stateStopped
		case stateActive:
			d = newDrain()
			w.life.drain = d
		case stateDraining, stateStopping:
			d = w.life.drain
		default: // stopped
			return s
		}
		switch {
		case stop:
			d.stopNow()
			return stateStopping
		case s == stateActive:
			return stateDraining
		}
		return s
	})
	switch from {
	case stateNew, stateStarting:
		w.stoppedBeforeActive(from)
	case stateActive:
		go w.drain(d)
	}
	return from, d
}

// stoppedBeforeActive ends a worker that Drain or Stop found new or
// starting: it fetched nothing.
func (w *Worker) stoppedBeforeActive(from state) {
	if from == stateNew {
		// Never started: nothing but the harnesses to release. A Start in
		// progress undoes its own set-up when it sees the state.
		w.teardown()
	}
	w.log.Info("drained before it became active: stopped")
}

// resume undoes a drain that has not decided to stop: the worker fetches
// again (the drain's goroutine starts the pollers).
func (w *Worker) resume() error {
	from, to := w.transition(func(s state) state {
		if s != stateDraining {
			return s
		}
		w.life.drain.resumed = true
		close(w.life.drain.resume)
		return stateActive
	})
	if from != stateDraining || to != stateActive {
		return teamster.Errorf(teamster.CodeInvalidRequest, "worker %s is %s, not draining", w.id, from)
	}
	w.registry.kickNow()
	return nil
}

// drain runs one drain, from active to draining (Drain) or stopping (Stop):
// stop fetching, wait for the runs, a resume, a Stop or the drain timeout,
// then either fetch again (resumed) or cancel what still runs and tear down.
func (w *Worker) drain(d *drain) {
	defer close(d.ended)
	w.log.WithField("running", w.InFlight()).Info("draining: stopped fetching; waiting for running attempts")
	w.registry.kickNow()
	w.stopFetching()
	if h := w.hooks.Load(); h != nil && h.beforeDrainWait != nil {
		h.beforeDrainWait()
	}
	idle := w.runs.idle()
	timer := time.NewTimer(w.cfg.DrainTimeout())
	defer timer.Stop()
	timedOut := false
	select {
	case <-idle:
	case <-d.resume:
	case <-d.now:
	case <-timer.C:
		timedOut = true
	}
	// Decide under the lifecycle lock, whatever woke the drain: a resume
	// that got in (it moved the worker back to active and returned nil to
	// its caller) wins even when the last run ended at the same moment;
	// from here on a resume is too late.
	resumed := false
	w.transition(func(s state) state {
		if resumed = d.resumed; resumed {
			return s
		}
		return stateStopping // from draining; a Stop made it stopping already
	})
	if resumed {
		w.startFetching()
		w.registry.kickNow()
		w.log.Info("drain undone: fetching again")
		return
	}
	if timedOut {
		w.log.WithField("running", w.InFlight()).Warn("drain timeout: cancelling the remaining attempts with drain_timeout")
		w.cancelRuns(teamster.Errorf(teamster.CodeDrainTimeout, "the worker's drain timeout (%s) ended the attempt", w.cfg.DrainTimeout()))
	}
	select {
	case <-idle:
	case <-d.now:
		if n := w.InFlight(); n > 0 {
			w.log.WithField("running", n).Warn("stopped: cancelling the remaining attempts with drain_timeout")
		}
		w.cancelRuns(teamster.Errorf(teamster.CodeDrainTimeout, "the worker was stopped without waiting for its drain timeout (%s)", w.cfg.DrainTimeout()))
		<-idle
	}
	w.teardown()
	w.log.Info("drained and stopped")
}

// cancelRuns cancels every running attempt with cause.
func (w *Worker) cancelRuns(cause error) {
	for _, r := range w.runs.all() {
		r.cancel(cause)
	}
}

// teardown ends the worker after its runs have ended (or before any began):
// stop renewing (every lease was released by its finish), leave the
// registry, stop answering control. It runs once.
func (w *Worker) teardown() {
	w.life.teardowns.Do(func() {
		w.closeHarnesses()
		w.keep.Stop()
		w.transition(func(state) state { return stateStopped })
		if w.registry != nil {
			w.registry.stop()
			w.registry.remove(context.Background())
		}
		w.unsubscribeControl()
		w.life.closeDone()
		w.fetch.claimers.Close()
	})
}

// closeHarnesses releases what harness implementations hold (a native
// process, say) once no run uses them.
func (w *Worker) closeHarnesses() {
	for id, h := range w.harnesses {
		if c, ok := h.impl.(io.Closer); ok {
			if err := c.Close(); err != nil {
				w.log.WithField("harness", id).Warn("closing the harness: " + err.Error())
			}
		}
	}
}
