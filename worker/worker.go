// Package worker is teamster's worker daemon as a library: it hosts harness
// implementations, claims attempts from JetStream under Redis session leases,
// runs them, streams their events and publishes exactly one terminal result
// each. cmd/worker is a thin main around it; tests start it in-process.
//
// The worker's lifecycle (starting, active, draining, stopped) is in
// lifecycle.go. A claimed attempt is a run, which goes through five phases,
// each in its own file and each the one owner of its state, in this order:
//
//	claim.go     claim      take the session lease for a fetched attempt
//	prepare.go   prepare    the checks under the lease, before the harness
//	turn.go      turn       the harness call; turn_events.go, turn_host.go
//	                        and turn_inject.go are its events, host
//	                        callbacks and injection
//	finish.go    finish     record the one outcome in Redis, fenced
//	deliver.go   delivery   the durable result, the mark, the result event
//
// run.go holds what every phase shares: the run, the step it is at, its
// subjects, and the worker's set of running runs.
package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
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
	// Env is passed to harness factories.
	Env FactoryEnv
	// Metrics; nil records into unregistered collectors.
	Metrics *metrics.Worker
	// Streams tunes the streams the worker creates when they are missing
	// (replicas); it never updates one.
	Streams bus.StreamOptions
	// AttemptRetention is how long the records of the attempts it finishes
	// stay in Redis; 0 is leases.FinishedTTL. Give routers and workers the
	// same value.
	AttemptRetention time.Duration
	// QuietAttempts logs each attempt's steps (claimed, finished,
	// delivered) at debug instead of info, for fleets whose rates make a
	// line per step too much.
	QuietAttempts bool
	// Version is the worker's build version, advertised in its registry
	// entry; empty leaves it out.
	Version string
}

// hosted is one harness the worker hosts, with its consumer.
type hosted struct {
	impl     harness.Harness
	consumer jetstream.Consumer
}

// Worker runs attempts. Its mutable state is in parts, each with its own
// lock and its own owner: the lifecycle (lifecycle.go), the pollers and
// slots (fetch.go), the running runs (run.go), the source latches of
// injected items (turn_inject.go) and the control subscriptions
// (control.go).
type Worker struct {
	cfg   *Config
	id    string
	log   logrus.FieldLogger
	debug bool // log logs at debug level
	steps logging.Lifecycle
	m     *metrics.Worker
	nc    *nats.Conn
	js    jetstream.JetStream
	// nativeState is the object store of sessions' native state (nativestate.go).
	nativeState *bus.NativeState
	rdb         redis.UniversalClient
	store       *leases.Store
	keep        *leases.Keeper
	streams     bus.StreamOptions
	harnesses   map[string]*hosted
	registry    *registry
	started     time.Time
	version     string

	life  lifecycle
	fetch fetcher
	runs  runSet
	// runPrefix is teamster.worker.<workerId>.run., the prefix of the run
	// subjects the routers relay inject and cancel requests to.
	runPrefix string
	sources   sourceLatches
	control   controlSubs

	// runCtx is the parent of every run; Kill cancels it.
	runCtx    context.Context
	cancelAll context.CancelCauseFunc
	// killed says Kill was called: runs record and publish nothing more.
	killed atomic.Bool

	// hooks are fault-injection points for tests (export_test.go); nil in
	// production.
	hooks atomic.Pointer[testHooks]
}

// testHooks are points where a test can act inside the worker's flow.
type testHooks struct {
	// afterMark runs after a run's mark published, before its result event.
	afterMark func(attemptID string)
	// beforeDrainWait runs in the drain, after fetching stopped, before it
	// waits for the runs, a resume, a Stop or the drain timeout.
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
	w := &Worker{m: p.Metrics, streams: p.Streams, version: p.Version,
		cfg: p.Config, id: p.Config.WorkerID, nc: p.NATS, js: js, rdb: p.Redis,
		store: leases.NewStore(p.Redis, leases.WithRetention(p.AttemptRetention)), log: log, debug: logging.DebugEnabled(log), steps: logging.NewLifecycle(log, p.QuietAttempts),
		harnesses: map[string]*hosted{},
		life:      newLifecycle(),
		fetch:     newFetcher(p.Config.Slots),
		runs:      newRunSet(),
		runPrefix: "teamster.worker." + p.Config.WorkerID + ".run.",
	}
	w.keep = leases.NewKeeper(leases.KeeperParams{
		Store: w.store, Holder: w.id, TTL: p.Config.LeaseTTL(), Logger: log,
		NewEpochQuarantine: p.Config.NewEpochQuarantine(),
		OnRenew: func(_ int, err error) {
			w.m.RenewRounds.Inc()
			if err != nil {
				w.m.RenewFailed.Inc()
			}
		},
		OnLost: func(l *leases.Lease, err error) {
			w.m.LeasesLost.Inc()
			if r := w.runs.get(l.AttemptID()); r != nil {
				r.cancel(teamster.AsError(err))
			}
		},
	})
	w.m.SlotsTotal.Set(float64(p.Config.Slots))
	w.m.SetState(stateNew.String(), allStates)
	if p.Env.logger == nil {
		p.Env.logger = log
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
		w.m.Hosting(hc.ID)
	}
	w.runCtx, w.cancelAll = context.WithCancelCause(context.Background())
	return w, nil
}

// ID is the worker id.
func (w *Worker) ID() string { return w.id }

// Ready reports why the worker does not take work, nil when it does: it is
// active and both NATS and Redis answer.
func (w *Worker) Ready(ctx context.Context) error {
	if st := w.state(); st != stateActive {
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

// InFlight is the number of attempts running now.
func (w *Worker) InFlight() int { return w.runs.len() }

// Kill simulates the process dying: it stops fetching and renewing, closes
// the NATS connection and the Redis client without any clean-up, and cancels
// every run. Nothing is released, finished or published. For fault tests.
// It changes no lifecycle state: a dead process advertises nothing.
func (w *Worker) Kill() {
	w.killed.Store(true)
	if w.registry != nil {
		w.registry.stop()
	}
	w.nc.Close()
	_ = w.rdb.Close()
	w.keep.Stop()
	w.cancelAll(errors.New("worker killed"))
	w.closeHarnesses()
	w.stopFetching()
	w.life.closeDone()
	w.fetch.claimers.Close()
}

func (w *Worker) harnessIDs() []string {
	ids := make([]string, 0, len(w.harnesses))
	for id := range w.harnesses {
		ids = append(ids, id)
	}
	return ids
}

// attemptLog is the logger of one attempt on this worker: the attempt, the
// session (hashed, never raw) and the harness.
func (w *Worker) attemptLog(a *bus.Attempt, harnessID string) logrus.FieldLogger {
	return w.log.WithFields(logrus.Fields{"attempt": a.AttemptID, "session": leases.Tag(a.ScopedSessionKey()), "harness": harnessID})
}
