// Package worker is teamster's worker daemon as a library: it hosts harness
// implementations, claims attempts from JetStream under Redis session leases,
// runs them, streams their events and publishes exactly one terminal result
// each. cmd/worker is a thin main around it; tests start it in-process.
//
// Lifecycle (states as advertised in the registry):
//
//	starting ──Start──▶ active ──Drain/SIGTERM──▶ draining ──runs ended──▶ stopped
//	                      ▲                          │
//	                      └────────Resume────────────┘ (only while draining)
//
// Shutdown order, as Drain does it: stop fetching; let running attempts
// finish (cancelling what remains with drain_timeout after the drain
// timeout); stop renewing leases (every lease was released by its finish);
// leave the registry; close nothing the caller owns.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/internal/gopool"
	"github.com/teamster-fleet/teamster/internal/logging"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/leases"
)

// Params are what a worker needs. The worker uses, but does not own, the NATS
// connection and the Redis client, except that Kill closes them.
type Params struct {
	Config *Config
	NATS   *nats.Conn
	Redis  redis.UniversalClient
	Logger logrus.FieldLogger
	// Clock for lease self-fencing; default the real clock.
	Clock clockwork.Clock
	// Env is passed to harness factories.
	Env FactoryEnv
	// Version is advertised in the registry.
	Version string
	// Metrics; nil records into unregistered collectors.
	Metrics *metrics.Worker
	// Streams tunes the streams the worker creates when they are missing
	// (replicas); it never updates one.
	Streams bus.StreamOptions
	// AttemptRetention is how long the records of the attempts it finishes
	// stay in Redis; 0 is leases.FinishedTTL. Give routers and workers the
	// same value.
	AttemptRetention time.Duration
}

// hosted is one harness the worker hosts, with its consumer.
type hosted struct {
	impl     harness.Harness
	consumer jetstream.Consumer
}

// Worker runs attempts.
type Worker struct {
	cfg     *Config
	id      string
	nc      *nats.Conn
	js      jetstream.JetStream
	rdb     redis.UniversalClient
	store   *leases.Store
	keep    *leases.Keeper
	log     logrus.FieldLogger
	debug   bool // log logs at debug level
	ver     string
	m       *metrics.Worker
	streams bus.StreamOptions

	harnesses map[string]*hosted
	slots     chan struct{}
	sources   sourceLatches
	// runMsgs receives every run's cancel and inject requests.
	runMsgs chan *nats.Msg

	mu        sync.Mutex
	state     string
	runs      map[string]*run
	fetchCtx  context.Context
	stopFetch context.CancelFunc
	fetchers  sync.WaitGroup
	// claiming bounds the claims in progress (fetched, not yet running or
	// given back), whatever the number of free slots.
	claiming chan struct{}
	// claimers runs the claims, on goroutines kept for reuse.
	claimers *gopool.Pool
	idlers   []chan struct{}
	started  time.Time

	// runCtx is the parent of every run; Kill cancels it.
	runCtx    context.Context
	cancelAll context.CancelCauseFunc

	registry    *registry
	controlSubs []*nats.Subscription
	resumeDrain chan struct{}
	drainEnded  chan struct{}
	done        chan struct{}
	doneOnce    sync.Once
	stopOnce    sync.Once
	killed      bool
	// startCalled says Start was called: a drain before the worker is
	// active leaves the clean-up to Start.
	startCalled bool

	// hooks are fault-injection points for tests (export_test.go); nil in
	// production.
	hooks atomic.Pointer[testHooks]
}

// testHooks are points where a test can act inside the worker's flow.
type testHooks struct {
	// afterMark runs after a run's mark published, before its result event.
	afterMark func(attemptID string)
	// beforeDrainWait runs in the drain, after fetching stopped, before it
	// waits for the runs, a resume or the drain timeout.
	beforeDrainWait func()
}

// New builds a worker from its config; Start runs it.
func New(p Params) (*Worker, error) {
	if p.Config == nil || p.NATS == nil || p.Redis == nil {
		return nil, errors.New("worker: Config, NATS and Redis are required")
	}
	if p.Logger == nil {
		p.Logger = logrus.StandardLogger()
	}
	if err := leases.CheckRetention(p.AttemptRetention); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	js, err := jetstream.New(p.NATS)
	if err != nil {
		return nil, fmt.Errorf("worker: jetstream: %w", err)
	}
	log := p.Logger.WithField("worker", p.Config.WorkerID)
	if p.Metrics == nil {
		p.Metrics = metrics.NewWorker(nil)
	}
	w := &Worker{m: p.Metrics, streams: p.Streams,
		cfg: p.Config, id: p.Config.WorkerID, nc: p.NATS, js: js, rdb: p.Redis,
		store: leases.NewStore(p.Redis, leases.WithRetention(p.AttemptRetention)), log: log, debug: logging.DebugEnabled(log), ver: p.Version,
		harnesses: map[string]*hosted{}, slots: make(chan struct{}, p.Config.Slots),
		claiming: make(chan struct{}, maxClaiming), claimers: gopool.New(claimerIdle), runMsgs: make(chan *nats.Msg, 4096),
		state: bus.WorkerStarting, runs: map[string]*run{},
		done: make(chan struct{}),
	}
	w.keep = leases.NewKeeper(leases.KeeperParams{
		Store: w.store, Holder: w.id, TTL: p.Config.LeaseTTL(), Clock: p.Clock, Logger: log,
		NewEpochQuarantine: p.Config.NewEpochQuarantine(),
		OnRenew: func(_ int, err error) {
			w.m.RenewRounds.Inc()
			if err != nil {
				w.m.RenewFailed.Inc()
			}
		},
		OnLost: func(l *leases.Lease, err error) {
			w.m.LeasesLost.Inc()
			w.mu.Lock()
			r := w.runs[l.AttemptID()]
			w.mu.Unlock()
			if r != nil {
				r.cancel(teamster.AsError(err))
			}
		},
	})
	w.m.SlotsTotal.Set(float64(p.Config.Slots))
	w.m.SetState(bus.WorkerStarting, allStates)
	if p.Env.Logger == nil {
		p.Env.Logger = log
	}
	for _, hc := range p.Config.Harnesses {
		factory, ok := implementation(hc.Implementation)
		if !ok {
			return nil, fmt.Errorf("worker: harness %s: implementation %q is not one of %s", hc.ID, hc.Implementation, implementationNames())
		}
		impl, err := factory(hc.Manifest, hc.Settings, p.Env)
		if err != nil {
			return nil, fmt.Errorf("worker: harness %s: %w", hc.ID, err)
		}
		w.harnesses[hc.ID] = &hosted{impl: impl}
	}
	w.runCtx, w.cancelAll = context.WithCancelCause(context.Background())
	return w, nil
}

// ID is the worker id.
func (w *Worker) ID() string { return w.id }

// State is the worker's lifecycle state.
func (w *Worker) State() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Done is closed when the worker has stopped (drained or killed).
func (w *Worker) Done() <-chan struct{} { return w.done }

// Start sets up the streams and consumers, loads the scripts, starts renewing
// leases and heartbeating, and starts fetching. It returns once the worker is
// active.
//
// A Start that fails leaves the worker stopped, with what it had set up
// undone; a Drain while Start is setting up makes it return ErrStopped.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.state != bus.WorkerStarting || w.startCalled {
		st := w.state
		w.mu.Unlock()
		return fmt.Errorf("worker: cannot start a worker that is %s", st)
	}
	w.startCalled = true
	w.mu.Unlock()
	if err := w.start(ctx); err != nil {
		w.stop()
		return err
	}
	return nil
}

// setupBudget is how long a starting worker retries the JetStream setup
// (streams, bucket, consumers) while JetStream does not answer.
const setupBudget = time.Minute

func (w *Worker) start(ctx context.Context) error {
	// Create what is missing, change nothing that exists: the routers own
	// the streams' configuration, and a worker's credentials cannot update
	// it (deploy/compose/nats-accounts.conf).
	// A cluster still forming, or electing a stream's leader, does not
	// answer in time: the setup is tried again for a while, logged.
	warn := func(err error) { w.log.Warn("JetStream setup not done yet; trying again: " + err.Error()) }
	var kv jetstream.KeyValue
	err := bus.RetryTransient(ctx, setupBudget, warn, func() error {
		var err error
		kv, err = bus.Ensure(ctx, w.js, w.streams)
		return err
	})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := w.store.Load(ctx); err != nil {
		return fmt.Errorf("worker: redis: %w", err)
	}
	for id, h := range w.harnesses {
		err := bus.RetryTransient(ctx, setupBudget, warn, func() error {
			var err error
			h.consumer, err = bus.EnsureHarnessConsumer(ctx, w.js, id)
			return err
		})
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	w.started = time.Now()
	w.registry = newRegistry(registryParams{kv: kv, w: w, log: w.log})
	w.keep.Start()
	if err := w.registry.put(ctx); err != nil {
		return fmt.Errorf("worker: registry: %w", err)
	}
	if err := w.subscribeControl(); err != nil {
		return err
	}
	go w.dispatchRunMsgs()
	w.mu.Lock()
	if w.state != bus.WorkerStarting {
		// Drained while starting: nothing was fetched; Start undoes what
		// it set up.
		w.mu.Unlock()
		return ErrStopped
	}
	w.state = bus.WorkerActive
	w.mu.Unlock()
	w.m.SetState(bus.WorkerActive, allStates)
	w.registry.start()
	w.registry.kickNow() // advertise "active" now, not at the next heartbeat
	w.startFetching()
	w.log.WithFields(logrus.Fields{"slots": w.cfg.Slots, "harnesses": w.harnessIDs()}).Info("worker active")
	return nil
}

func (w *Worker) harnessIDs() []string {
	ids := make([]string, 0, len(w.harnesses))
	for id := range w.harnesses {
		ids = append(ids, id)
	}
	return ids
}

var allStates = []string{bus.WorkerStarting, bus.WorkerActive, bus.WorkerDraining, bus.WorkerStopped}

func (w *Worker) setState(s string) {
	w.mu.Lock()
	w.state = s
	w.mu.Unlock()
	w.m.SetState(s, allStates)
}

// Ready reports why the worker does not take work, nil when it does: it is
// active and both NATS and Redis answer.
func (w *Worker) Ready(ctx context.Context) error {
	if st := w.State(); st != bus.WorkerActive {
		return fmt.Errorf("worker is %s", st)
	}
	if !w.nc.IsConnected() {
		return errors.New("NATS is not connected")
	}
	if err := w.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// startFetching starts the pollers of every hosted harness.
func (w *Worker) startFetching() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fetchCtx, w.stopFetch = context.WithCancel(context.Background())
	for id, h := range w.harnesses {
		for i := 0; i < pollersPerHarness(w.cfg.Slots); i++ {
			w.fetchers.Add(1)
			go w.poll(w.fetchCtx, id, h)
		}
	}
}

// stopFetching stops every poller and waits for them.
func (w *Worker) stopFetching() {
	w.mu.Lock()
	stop := w.stopFetch
	w.stopFetch = nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
	w.fetchers.Wait()
}

// idle returns a channel closed once no attempt is running.
func (w *Worker) idle() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	if len(w.runs) == 0 {
		close(ch)
		return ch
	}
	w.idlers = append(w.idlers, ch)
	return ch
}

// addRun registers a run; removeRun unregisters it and wakes idle waiters
// when it was the last.
func (w *Worker) addRun(r *run) {
	w.mu.Lock()
	w.runs[r.attempt.AttemptID] = r
	w.mu.Unlock()
}

func (w *Worker) removeRun(r *run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.runs, r.attempt.AttemptID)
	if len(w.runs) == 0 {
		for _, ch := range w.idlers {
			close(ch)
		}
		w.idlers = nil
	}
}

// Running returns the ids of the attempts running now.
func (w *Worker) Running() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.runs))
	for id := range w.runs {
		ids = append(ids, id)
	}
	return ids
}

// InFlight is the number of attempts running now.
func (w *Worker) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.runs)
}

// ErrResumed is returned by Drain when the drain was undone by Resume.
var ErrResumed = errors.New("drain undone by resume")

// ErrStopped is returned by Start when the worker was drained before it
// became active (or had stopped already).
var ErrStopped = errors.New("worker: drained before it became active")

// Drain stops fetching, lets running attempts finish for up to the drain
// timeout (then cancels what remains with drain_timeout), leaves the registry
// and stops. It returns nil when the worker has stopped, ErrResumed when a
// Resume undid the drain first; ctx bounds the wait, not the drain. A worker
// that is not active yet (Start not called, or not done) stops at once: it
// has fetched nothing.
func (w *Worker) Drain(ctx context.Context) error {
	w.mu.Lock()
	switch w.state {
	case bus.WorkerStopped:
		w.mu.Unlock()
		return nil
	case bus.WorkerStarting:
		w.state = bus.WorkerStopped
		inStart := w.startCalled
		w.mu.Unlock()
		w.m.SetState(bus.WorkerStopped, allStates)
		if !inStart {
			// Never started: nothing but the harnesses to release. A Start
			// in progress undoes its own set-up when it sees the state.
			w.stop()
		}
		w.log.Info("drained before it became active: stopped")
		return nil
	case bus.WorkerActive:
		w.state = bus.WorkerDraining
		w.m.SetState(bus.WorkerDraining, allStates)
		w.resumeDrain = make(chan struct{})
		w.drainEnded = make(chan struct{})
		go w.drain(w.resumeDrain, w.drainEnded)
	}
	ended := w.drainEnded
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ended:
		select {
		case <-w.done:
			return nil
		default:
			return ErrResumed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Worker) drain(resume <-chan struct{}, ended chan struct{}) {
	defer close(ended)
	w.log.WithField("running", w.InFlight()).Info("draining: stopped fetching; waiting for running attempts")
	w.registry.kickNow()
	w.stopFetching()
	if h := w.hooks.Load(); h != nil && h.beforeDrainWait != nil {
		h.beforeDrainWait()
	}
	idle := w.idle()
	timer := time.NewTimer(w.cfg.DrainTimeout())
	defer timer.Stop()
	timedOut := false
	select {
	case <-idle:
	case <-resume:
	case <-timer.C:
		timedOut = true
	}
	// Decide under the lock, whatever woke the drain: a Resume that got in
	// (it set the state back to active and returned nil to its caller) wins
	// even when the last run ended at the same moment; from here on a
	// Resume is too late.
	w.mu.Lock()
	resumed := w.state == bus.WorkerActive
	if !resumed {
		w.resumeDrain = nil
	}
	w.mu.Unlock()
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
	<-idle
	w.stop()
	w.log.Info("drained and stopped")
}

// stop ends the worker after its runs have ended: stop renewing (every lease
// was released by its finish), leave the registry, stop answering control.
func (w *Worker) stop() { w.stopOnce.Do(w.stopNow) }

func (w *Worker) stopNow() {
	w.closeHarnesses()
	w.keep.Stop()
	w.setState(bus.WorkerStopped)
	if w.registry != nil {
		w.registry.stop()
		w.registry.remove(context.Background())
	}
	w.unsubscribeControl()
	w.doneOnce.Do(func() { close(w.done) })
	w.claimers.Close()
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

func (w *Worker) cancelRuns(cause error) {
	w.mu.Lock()
	runs := make([]*run, 0, len(w.runs))
	for _, r := range w.runs {
		runs = append(runs, r)
	}
	w.mu.Unlock()
	for _, r := range runs {
		r.cancel(cause)
	}
}

// Kill simulates the process dying: it stops fetching and renewing, closes
// the NATS connection and the Redis client without any clean-up, and cancels
// every run. Nothing is released, finished or published. For fault tests.
func (w *Worker) Kill() {
	w.mu.Lock()
	w.killed = true
	w.mu.Unlock()
	if w.registry != nil {
		w.registry.stop()
	}
	w.nc.Close()
	_ = w.rdb.Close()
	w.keep.Stop()
	w.cancelAll(errors.New("worker killed"))
	w.closeHarnesses()
	w.stopFetching()
	w.doneOnce.Do(func() { close(w.done) })
	w.claimers.Close()
}

func (w *Worker) isKilled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killed
}
