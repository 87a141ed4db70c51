// Package fleettest starts a whole fleet in one test process: a private
// redis-server, a private embedded NATS, one router and workers hosting the
// scripted harness, each with its own connections so that a test can kill
// one. Nothing is faked. The daemons are assembled by internal/fleet, as
// `teamster dev`, bench and chaos assemble theirs; what is the tests' own
// here is the servers (internal/testenv: restartable, pausable), the
// in-memory ledger and the test-sized timings.
package fleettest

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleet"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// Options shape a fleet.
type Options struct {
	// Workers to start; default 3.
	Workers int
	// Slots per worker; default 64.
	Slots int
	// LeaseTTL of the workers; default 2s, so lease faults resolve quickly.
	LeaseTTL time.Duration
	// DrainTimeout of the workers; default 30s.
	DrainTimeout time.Duration
	// ReaperInterval of the router; default 200ms.
	ReaperInterval time.Duration
	// Policy of the router; nil is all auto.
	Policy *selection.Policy
	// Verbose logs at debug level to the test log.
	Verbose bool
	// Metrics serves the router's and each worker's /metrics, /healthz and
	// /readyz on loopback ports (MetricsURL).
	Metrics bool
	// Quarantine keeps the workers' default quarantine after a Redis data
	// loss (one lease TTL before any new fence epoch). Off by default: each
	// fleet's Redis is fresh, and new sessions should not wait.
	Quarantine bool
	// WorkerConfig, when set, builds each worker's config instead of
	// worker.DevConfig (LeaseTTL and DrainTimeout still apply).
	WorkerConfig func(id string, slots int) *worker.Config
}

// Fleet is a running fleet.
type Fleet struct {
	T       testing.TB
	Opts    Options
	Redis   *testenv.Redis
	NATS    *testenv.NATS
	Router  *router.Router
	Workers []*worker.Worker
	Client  *client.Client
	Ledger  *scripted.MemoryLedger
	Log     *logrus.Logger
	// RDB is a Redis client for test inspection.
	RDB *redis.Client
	// MetricsURL maps "router" and each worker id to its metrics server's
	// base URL (http://127.0.0.1:port) when Options.Metrics is set.
	MetricsURL map[string]string

	// fleet is the assembly (internal/fleet) the daemons run in; its
	// teardown steps are t's cleanups.
	fleet *fleet.Fleet
}

// Start starts a fleet for t; everything stops when t ends.
func Start(t testing.TB, o Options) *Fleet {
	t.Helper()
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.Slots == 0 {
		o.Slots = 64
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.ReaperInterval == 0 {
		o.ReaperInterval = 200 * time.Millisecond
	}
	f := &Fleet{T: t, Opts: o, Redis: testenv.NewRedis(t), NATS: testenv.NewNATS(t), Ledger: &scripted.MemoryLedger{},
		MetricsURL: map[string]string{}}
	f.Log = logrus.New()
	f.Log.SetOutput(io.Discard)
	if o.Verbose {
		f.Log.SetOutput(testWriter{t})
		f.Log.SetLevel(logrus.DebugLevel)
	}
	f.RDB = redis.NewClient(&redis.Options{Addr: f.Redis.Addr()})
	t.Cleanup(func() { f.RDB.Close() })
	f.fleet = fleet.New(fleet.Options{
		NATSURL:      f.NATS.URL(),
		NATSOptions:  []nats.Option{nats.ReconnectWait(50 * time.Millisecond)},
		Redis:        fleet.RedisOf(f.Redis),
		Logger:       f.Log,
		Workers:      fleet.WorkerTuning{LeaseTTL: o.LeaseTTL, DrainTimeout: o.DrainTimeout, FreshRedis: !o.Quarantine},
		ServeMetrics: o.Metrics,
		DrainWait:    5 * time.Second,
		Cleanup:      t.Cleanup,
		Test:         fleet.TestHooks{Ledger: f.Ledger},
	})
	f.StartRouter()
	for i := 0; i < o.Workers; i++ {
		f.StartWorker(fmt.Sprintf("w%d", i+1))
	}
	nc := f.Connect("client")
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f.Client = c
	f.WaitRegistered(o.Workers)
	return f
}

// Connect opens a NATS connection closed when the test ends.
func (f *Fleet) Connect(name string) *nats.Conn {
	f.T.Helper()
	nc, err := f.fleet.ConnectNATS(name)
	if err != nil {
		f.T.Fatal(err)
	}
	return nc
}

// StartRouter starts a router (again, after the test stopped it), with its
// own NATS connection and Redis client.
func (f *Fleet) StartRouter() {
	f.T.Helper()
	r, err := f.fleet.StartRouter(context.Background(), fleet.RouterOptions{Policy: f.Opts.Policy, ReaperInterval: f.Opts.ReaperInterval})
	if err != nil {
		f.T.Fatal(err)
	}
	f.noteMetrics("router")
	f.Router = r
}

// StartWorker starts a worker hosting the dev harnesses (or
// Options.WorkerConfig's) with its own NATS connection and Redis client.
func (f *Fleet) StartWorker(id string) *worker.Worker {
	f.T.Helper()
	cfg := worker.DevConfig(id, f.Opts.Slots)
	if f.Opts.WorkerConfig != nil {
		cfg = f.Opts.WorkerConfig(id, f.Opts.Slots)
	}
	w, err := f.fleet.StartWorker(context.Background(), cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	f.noteMetrics(id)
	f.Workers = append(f.Workers, w)
	return w
}

// noteMetrics records the metrics server of name in MetricsURL.
func (f *Fleet) noteMetrics(name string) {
	if u := f.fleet.MetricsURL(name); u != "" {
		f.MetricsURL[name] = u
	}
}

// Worker returns the worker with id, nil when none.
func (f *Fleet) Worker(id string) *worker.Worker {
	for _, w := range f.Workers {
		if w.ID() == id {
			return w
		}
	}
	return nil
}

// WaitRegistered waits until the router sees harnesses of n live workers.
func (f *Fleet) WaitRegistered(n int) {
	f.T.Helper()
	if err := f.fleet.WaitWorkers(context.Background(), n, 10*time.Second); err != nil {
		f.T.Fatal(err)
	}
}

// WaitTimeout bounds the waits of Submit, Result and WaitEvent: a liveness
// bound (a test that hangs fails), not a timing assertion.
const WaitTimeout = 60 * time.Second

// Submit submits a through c and fails t unless it is accepted. The handle
// is closed when t ends.
func Submit(t testing.TB, c *client.Client, a *bus.Attempt) *client.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := c.Submit(ctx, a)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if h.Reply.Status != bus.StatusAccepted {
		t.Fatalf("submit: %+v, want accepted", h.Reply)
	}
	t.Cleanup(h.Close)
	return h
}

// Result waits for h's result, failing t when none comes within
// WaitTimeout.
func Result(t testing.TB, h *client.Handle) *bus.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	r, err := h.Result(ctx)
	if err != nil {
		t.Fatalf("result of %s: %v", h.AttemptID(), err)
	}
	return r
}

// WaitEvent reads h's events until the first of type typ and returns it,
// failing t when the events end first or none comes within WaitTimeout.
func WaitEvent(t testing.TB, h *client.Handle, typ string) bus.Event {
	t.Helper()
	timeout := time.After(WaitTimeout)
	for {
		select {
		case e, ok := <-h.Events():
			if !ok {
				t.Fatalf("events ended before a %s event", typ)
			}
			if e.Type == typ {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event", typ)
		}
	}
}

// Attempt is a prepared attempt for session that auto selection sends to the
// scripted "codex" harness.
func Attempt(session, prompt string) *bus.Attempt {
	return &bus.Attempt{
		V: bus.Version, AgentID: "main", SessionKey: session, SessionID: "sid-" + session, StorePath: "/var/openclaw/" + session,
		Provider: "openai", ModelID: "gpt-5.6-sol",
		ModelProvider: &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}}, RequestTransportOverrides: "none"},
		Prompt:        prompt,
	}
}

// Script builds a scripted prompt from steps.
func Script(steps ...string) string {
	s := `{"script":[`
	for i, st := range steps {
		if i > 0 {
			s += ","
		}
		s += st
	}
	return s + "]}"
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
