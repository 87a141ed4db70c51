// Package fleet assembles a teamster fleet: the one wiring of NATS, Redis,
// routers and workers that `teamster dev`, the tests (internal/fleettest),
// the benchmarks (bench) and the reliability suite (chaos) share.
//
// In this process, a Fleet connects to a NATS server and a Redis (started
// here with StartNATS and StartRedis, or reached at their URLs) and starts
// routers and workers on them, each with its own NATS connection and Redis
// client, as cmd/router and cmd/worker connect. For fleets of processes
// (chaos), the same Options give the daemons' flags (DaemonArgs), the same
// WorkerTuning their config files, and Wait and Readyz the readiness wait.
//
// The routers set up the JetStream streams, the registry bucket and the
// harnesses' consumers (bus.Setup, bus.EnsureHarnessConsumer); workers look
// them up and wait for them. A fleet needs no more of NATS than a server
// with JetStream.
package fleet

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// DefaultDrainWait is Options.DrainWait's default.
const DefaultDrainWait = 10 * time.Second

// Options shape a fleet: how its daemons reach NATS and Redis, and what it
// changes in them.
type Options struct {
	// NATSURL is the NATS server (or comma-separated servers of a cluster)
	// every connection of the fleet reaches (the daemons' --nats-url).
	NATSURL string
	// NATSOptions are added to every NATS connection's, after its name and
	// nats.MaxReconnects(-1) (reconnect forever, as the daemons do).
	NATSOptions []nats.Option
	// Principal, when set, gives the options a connection of the principal
	// of role and name adds after NATSOptions (its NKey, the CA, its inbox
	// prefix: `teamster dev --secure`): the routers' connections are role
	// "router" (name RouterOptions.ID, or "router"), the workers' "worker"
	// (their id), and ConnectNATSAs says its own. nil adds none, and
	// ConnectNATS never asks it.
	Principal func(role, name string) []nats.Option
	// Redis is how every Redis client of the fleet reaches Redis, as the
	// daemons' --redis-url and --redis-mode say it (cmdutil.Common.NewRedis:
	// standalone, sentinel or cluster).
	Redis cmdutil.Common
	// InstrumentRedis, when set, is given each daemon's Redis client before
	// the daemon uses it (bench's round-trip counters).
	InstrumentRedis func(redis.UniversalClient) error
	// Streams tunes the streams the daemons create (replicas).
	Streams bus.StreamOptions
	// NamePrefix prefixes the NATS connection names: a router's is
	// NamePrefix+"router", a worker's NamePrefix+its id.
	NamePrefix string
	// Logger of every daemon, with the field proc=router or proc=<worker id>;
	// nil discards the logs.
	Logger logrus.FieldLogger
	// Workers is applied to the config of every worker StartWorker starts.
	Workers WorkerTuning
	// ServeMetrics serves each daemon's /metrics, /healthz and /readyz on a
	// loopback port (MetricsURL).
	ServeMetrics bool
	// DrainWait bounds how long the teardown waits for a worker's drain
	// before it kills the worker; default DefaultDrainWait.
	DrainWait time.Duration
	// Cleanup, when set, receives each teardown step as the fleet creates
	// it (testing.TB.Cleanup, which runs them in reverse order when the test
	// ends), and Close does nothing. Without it Close runs them, in reverse
	// order of creation.
	Cleanup func(func())
	// Test holds the hooks only test fleets set.
	Test TestHooks
}

// TestHooks are the test-only hooks of a fleet: `teamster dev` and bench
// leave them zero.
type TestHooks struct {
	// Ledger receives the scripted harness's run records from every worker
	// of the fleet (worker.FactoryEnv.Ledger), for the tests' checks.
	Ledger scripted.Ledger
}

// RouterOptions shape one router.
type RouterOptions struct {
	// Policy is the runtime policy; nil is all auto.
	Policy *selection.Policy
	// ReaperInterval of the reaper; 0 is the router's default.
	ReaperInterval time.Duration
	// ID is the router's id (router.Params.RouterID; default a generated
	// one) and its principal's name ("router" when empty).
	ID string
}

// Fleet is routers and workers running in this process. Its methods may be
// called from several goroutines.
type Fleet struct {
	opts Options
	log  logrus.FieldLogger

	mu         sync.Mutex
	router     *router.Router
	workers    []*worker.Worker
	metricsURL map[string]string
	closers    []func()
}

// New returns a fleet with nothing started yet.
func New(o Options) *Fleet {
	if o.DrainWait == 0 {
		o.DrainWait = DefaultDrainWait
	}
	log := o.Logger
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	return &Fleet{opts: o, log: log, metricsURL: map[string]string{}}
}

// Options are the fleet's options.
func (f *Fleet) Options() Options { return f.opts }

// onClose registers a teardown step.
func (f *Fleet) onClose(fn func()) {
	if f.opts.Cleanup != nil {
		f.opts.Cleanup(fn)
		return
	}
	f.mu.Lock()
	f.closers = append(f.closers, fn)
	f.mu.Unlock()
}

// Close tears down what the fleet started, in reverse order: each worker
// drains (killed after DrainWait), each router stops, their connections
// close. A second call does nothing; with Options.Cleanup, neither does the
// first (the test's cleanup tears down).
func (f *Fleet) Close() {
	f.mu.Lock()
	closers := f.closers
	f.closers = nil
	f.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// dialNATS connects to the fleet's NATS as the principal of role and
// principal (none when role is ""); the caller closes the connection.
func (f *Fleet) dialNATS(name, role, principal string, opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name(f.opts.NamePrefix + name), nats.MaxReconnects(-1)}, f.opts.NATSOptions...)
	if role != "" && f.opts.Principal != nil {
		all = append(all, f.opts.Principal(role, principal)...)
	}
	return nats.Connect(f.opts.NATSURL, append(all, opts...)...)
}

// dialRedis is a Redis client of the fleet's Redis, instrumented; the
// caller closes it.
func (f *Fleet) dialRedis() (redis.UniversalClient, error) {
	rdb, err := f.opts.Redis.NewRedis()
	if err != nil {
		return nil, err
	}
	if f.opts.InstrumentRedis != nil {
		if err := f.opts.InstrumentRedis(rdb); err != nil {
			rdb.Close()
			return nil, err
		}
	}
	return rdb, nil
}

// ConnectNATS opens a connection to the fleet's NATS named NamePrefix+name,
// with the fleet's options and opts; the fleet's teardown closes it.
func (f *Fleet) ConnectNATS(name string, opts ...nats.Option) (*nats.Conn, error) {
	return f.ConnectNATSAs(name, "", "", opts...)
}

// ConnectNATSAs is ConnectNATS as the principal of role and principal:
// Options.Principal's options for it come after the fleet's, before opts.
// A role "" is no principal (ConnectNATS).
func (f *Fleet) ConnectNATSAs(name, role, principal string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := f.dialNATS(name, role, principal, opts...)
	if err != nil {
		return nil, err
	}
	f.onClose(nc.Close)
	return nc, nil
}

// NewRedis is a client of the fleet's Redis, as its daemons get one; the
// fleet's teardown closes it.
func (f *Fleet) NewRedis() (redis.UniversalClient, error) {
	rdb, err := f.dialRedis()
	if err != nil {
		return nil, err
	}
	f.onClose(func() { rdb.Close() })
	return rdb, nil
}

// StartRouter starts a router with its own NATS connection and Redis
// client; the teardown stops it. Router returns it from then on.
func (f *Fleet) StartRouter(ctx context.Context, o RouterOptions) (*router.Router, error) {
	principal := o.ID
	if principal == "" {
		principal = "router"
	}
	nc, err := f.ConnectNATSAs("router", "router", principal)
	if err != nil {
		return nil, err
	}
	rdb, err := f.NewRedis()
	if err != nil {
		return nil, err
	}
	reg := cmdutil.Registry()
	r, err := router.New(router.Params{NATS: nc, Redis: rdb, Policy: o.Policy, Logger: f.log.WithField("proc", "router"),
		RouterID: o.ID, ReaperInterval: o.ReaperInterval, Metrics: metrics.NewRouter(reg), Streams: f.opts.Streams, Version: cmdutil.Version()})
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	if err := f.serveMetrics("router", reg, r.Ready); err != nil {
		r.Stop()
		return nil, err
	}
	f.onClose(r.Stop)
	f.mu.Lock()
	f.router = r
	f.mu.Unlock()
	return r, nil
}

// StartWorker starts a worker of cfg, as Options.Workers tunes it (cfg
// itself changes), with its own NATS connection and Redis client. The
// teardown drains it (killing it when the drain takes longer than
// DrainWait) and closes its connections.
func (f *Fleet) StartWorker(ctx context.Context, cfg *worker.Config) (*worker.Worker, error) {
	cfg = f.opts.Workers.Apply(cfg)
	nc, err := f.dialNATS(cfg.WorkerID, "worker", cfg.WorkerID)
	if err != nil {
		return nil, err
	}
	rdb, err := f.dialRedis()
	if err != nil {
		nc.Close()
		return nil, err
	}
	closeConns := func() {
		nc.Close()
		rdb.Close()
	}
	reg := cmdutil.Registry()
	w, err := worker.New(worker.Params{Config: cfg, NATS: nc, Redis: rdb, Logger: f.log.WithField("proc", cfg.WorkerID),
		Env: worker.FactoryEnv{Ledger: f.opts.Test.Ledger}, Metrics: metrics.NewWorker(reg), Streams: f.opts.Streams,
		Version: cmdutil.Version()})
	if err != nil {
		closeConns()
		return nil, err
	}
	if err := f.serveMetrics(cfg.WorkerID, reg, w.Ready); err != nil {
		closeConns()
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		closeConns()
		return nil, err
	}
	f.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.DrainWait)
		defer cancel()
		if w.Drain(ctx) != nil {
			w.Kill()
		}
		closeConns()
	})
	f.mu.Lock()
	f.workers = append(f.workers, w)
	f.mu.Unlock()
	return w, nil
}

// serveMetrics serves reg and ready on a loopback port when the options
// say so; the teardown closes the server.
func (f *Fleet) serveMetrics(name string, reg *prometheus.Registry, ready metrics.ReadyFunc) error {
	if !f.opts.ServeMetrics {
		return nil
	}
	srv, err := metrics.Serve("127.0.0.1:0", reg, ready)
	if err != nil {
		return err
	}
	f.onClose(func() { srv.Close() })
	f.mu.Lock()
	f.metricsURL[name] = "http://" + srv.Addr()
	f.mu.Unlock()
	return nil
}

// Router is the router started last, nil before the first.
func (f *Fleet) Router() *router.Router {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.router
}

// Workers are the workers started, in order of start.
func (f *Fleet) Workers() []*worker.Worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*worker.Worker(nil), f.workers...)
}

// MetricsURL is the base URL (http://127.0.0.1:port) of the metrics server
// of "router" (the last router) or of a worker id; "" when none is served.
func (f *Fleet) MetricsURL(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.metricsURL[name]
}

// errNoRouter is what a wait on the router answers before one started.
var errNoRouter = errors.New("fleet: no router started")
