package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/internal/redisproc"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// The same wiring as internal/fleettest, without testing.T: a private
// redis-server process (or, for the topology scenario, a Sentinel set or a
// Redis Cluster, bench/topology.go), an embedded NATS with JetStream on a
// loopback port (the child worker of the memory scenario connects to it),
// one router and workers, each with its own NATS connection and Redis
// client, the way cmd/router and cmd/worker connect (cmdutil.Common.NewRedis:
// default go-redis options).

// servers are the bench's private Redis and NATS server.
type servers struct {
	dir  string
	mode string // "" (standalone), topoSentinel or topoCluster
	// Exactly one of redis, sentinel and cluster is set.
	redis    *redisproc.Redis
	sentinel *redisproc.SentinelSet
	cluster  *redisproc.Cluster
	nodes    []redisNode // every redis-server process, for their CPU
	nats     *server.Server
	natsURL  string
}

func startRedis(dir string) (*servers, error) {
	if err := os.MkdirAll(filepath.Join(dir, "redis"), 0o755); err != nil {
		return nil, err
	}
	r, err := redisproc.Start(filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	s := &servers{dir: dir, redis: r}
	s.nodes, _ = s.findNodes(context.Background())
	return s, nil
}

func (s *servers) startNATS() error {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Port: 0, StoreDir: filepath.Join(s.dir, "jetstream")})
	if err != nil {
		return err
	}
	s.nats = srv
	s.natsURL = "nats://" + srv.Addr().(*net.TCPAddr).String()
	return nil
}

// redisURL is the Redis URL of the servers in their mode (cmdutil's
// --redis-url).
func (s *servers) redisURL() string {
	switch {
	case s.sentinel != nil:
		return s.sentinel.URL()
	case s.cluster != nil:
		return s.cluster.URL()
	}
	return s.redis.URL()
}

// close stops the servers, every redis-server process included; a second
// call does nothing.
func (s *servers) close() {
	if s.nats != nil {
		s.nats.Shutdown()
		s.nats.WaitForShutdown()
		s.nats = nil
	}
	if s.redis != nil {
		_ = s.redis.Kill()
		s.redis = nil
	}
	if s.sentinel != nil {
		s.sentinel.Close()
		s.sentinel = nil
	}
	if s.cluster != nil {
		s.cluster.Close()
		s.cluster = nil
	}
}

// newRedis is a client of a standalone redis-server with cmd/*'s options
// (redis.ParseURL defaults) and, when hook is set, the round-trip counter.
// The fleet's clients come from servers.newFleetRedis.
func newRedis(url string, hook redis.Hook) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opts)
	if hook != nil {
		c.AddHook(hook)
	}
	return c, nil
}

// clientInbox is the inbox prefix of the bench's client connection.
const clientInbox = "_INBOX.bench"

func connectNATS(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, opts...)...)
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.ErrorLevel)
	return l
}

// fleet is a router and workers in this process, and a client.
type fleet struct {
	srv     *servers
	log     *logrus.Logger
	rt      *rtCounter // on the router's and the workers' Redis clients (a cluster client's node clients)
	issued  *rtCounter // on the router's and the workers' cluster clients themselves; nil unless cluster mode
	router  *router.Router
	workers []*worker.Worker
	client  *client.Client
	closers []func()
	slots   int // of each measured worker
}

// fleetSlots is how many slots each of `workers` workers needs for
// `sessions` sessions to run at once, and never fewer than the worker
// default. With fewer, the sessions beyond the fleet's slots wait in
// TEAMSTER_ATTEMPTS, which is a different load: smaller batches, more pull
// requests, more CPU per attempt.
func fleetSlots(sessions, workers int) int {
	return max(worker.DefaultSlots, (sessions+workers-1)/workers)
}

// Harness ids the bench uses besides the dev config's codex and claude-cli.
const (
	probeHarnessID  = "probe"
	memoryHarnessID = "membench"
)

// startFleet starts a router, `workers` workers with worker.DevConfig and
// `slots` slots each, and one more worker hosting only the probe harness (so
// that its pollers do not hold slots of the measured workers).
func startFleet(ctx context.Context, srv *servers, workers, slots int) (*fleet, error) {
	f := &fleet{srv: srv, log: quietLogger(), rt: &rtCounter{}, slots: slots}
	if srv.mode == topoCluster {
		f.issued = &rtCounter{}
	}
	if err := f.startRouter(ctx); err != nil {
		f.close()
		return nil, err
	}
	for i := 1; i <= workers; i++ {
		if _, err := f.startWorker(ctx, worker.DevConfig(fmt.Sprintf("w%d", i), slots)); err != nil {
			f.close()
			return nil, err
		}
	}
	if _, err := f.startWorker(ctx, probeConfig("wprobe")); err != nil {
		f.close()
		return nil, err
	}
	// The client's inbox (its one events subscription) is under
	// clientInbox, where the throughput audit listens too.
	nc, err := connectNATS(srv.natsURL, "bench-client", nats.CustomInboxPrefix(clientInbox))
	if err != nil {
		f.close()
		return nil, err
	}
	f.closers = append(f.closers, nc.Close)
	if f.client, err = client.New(nc); err != nil {
		f.close()
		return nil, err
	}
	if err := f.waitManifests(map[string]int{"codex": workers, probeHarnessID: 1}, 15*time.Second); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// probeConfig is a worker hosting only the probe harness.
func probeConfig(id string) *worker.Config {
	c := &worker.Config{WorkerID: id, Slots: 4, LeaseTTLMs: worker.DefaultLeaseTTL.Milliseconds(),
		DrainTimeoutMs: 5000, Harnesses: []worker.HarnessConfig{{Implementation: probeImpl, Manifest: selection.Manifest{
			ID: probeHarnessID, Label: "Probe", PluginID: probeHarnessID,
			AutoSelection: &selection.AutoSelection{ProviderIDs: []string{}}, Injection: selection.InjectionV2,
		}}}}
	return c
}

func (f *fleet) startRouter(ctx context.Context) error {
	nc, err := connectNATS(f.srv.natsURL, "router")
	if err != nil {
		return err
	}
	f.closers = append(f.closers, nc.Close)
	rdb, err := f.srv.newFleetRedis(f.rt, f.issued)
	if err != nil {
		return err
	}
	f.closers = append(f.closers, func() { rdb.Close() })
	r, err := router.New(router.Params{NATS: nc, Redis: rdb, Logger: f.log.WithField("proc", "router"),
		Metrics: metrics.NewRouter(prometheus.NewRegistry())})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	f.router = r
	f.closers = append(f.closers, r.Stop)
	return nil
}

func (f *fleet) startWorker(ctx context.Context, cfg *worker.Config) (*worker.Worker, error) {
	// The bench's redis-server is its own and fresh: no lease of an earlier
	// epoch can exist, so no quarantine after its "data loss" (which would
	// hold every first claim for one lease TTL).
	cfg.NewEpochQuarantineMs = -1
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	nc, err := connectNATS(f.srv.natsURL, cfg.WorkerID)
	if err != nil {
		return nil, err
	}
	rdb, err := f.srv.newFleetRedis(f.rt, f.issued)
	if err != nil {
		nc.Close()
		return nil, err
	}
	w, err := worker.New(worker.Params{Config: cfg, NATS: nc, Redis: rdb, Logger: f.log.WithField("proc", cfg.WorkerID),
		Metrics: metrics.NewWorker(prometheus.NewRegistry())})
	if err != nil {
		nc.Close()
		rdb.Close()
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		nc.Close()
		rdb.Close()
		return nil, err
	}
	f.workers = append(f.workers, w)
	f.closers = append(f.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if w.Drain(ctx) != nil {
			w.Kill()
		}
		nc.Close()
		rdb.Close()
	})
	return w, nil
}

// waitManifests waits until the router sees, for every harness id, at least
// that many live workers advertising it.
func (f *fleet) waitManifests(want map[string]int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got := map[string]int{}
		for _, m := range f.router.Manifests() {
			got[m.ID]++
		}
		ok := true
		for id, n := range want {
			if got[id] < n {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router did not see the workers in the registry within %s (sees %v, want %v)", timeout, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// close stops everything in reverse order of start.
func (f *fleet) close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
	f.closers = nil
}

// echoAttempt is an attempt for session that auto selection sends to the
// scripted "codex" harness, which echoes the prompt (one partial event, one
// assistant text): the no-op turn.
func echoAttempt(session string) *bus.Attempt {
	return pinnedAttempt(session, "codex", "hello")
}

// pinnedAttempt is an attempt for session pinned to harnessID.
func pinnedAttempt(session, harnessID, prompt string) *bus.Attempt {
	a := &bus.Attempt{
		V: bus.Version, AgentID: "main", SessionKey: session, SessionID: "sid-" + session, StorePath: "/var/openclaw/" + session,
		Provider: "openai", ModelID: "gpt-5.6-sol",
		ModelProvider: &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{harnessID}}, RequestTransportOverrides: "none"},
		Prompt:        prompt,
	}
	if harnessID != "codex" {
		a.AgentHarnessID = harnessID
	}
	return a
}

var errNotOK = errors.New("result not ok")
