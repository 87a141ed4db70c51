package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	// Imported as assembly: this package's own fleet type is the fleet
	// the bench measures.
	assembly "github.com/teamster-fleet/teamster/internal/fleet"
	"github.com/teamster-fleet/teamster/internal/redisproc"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// The fleet internal/fleet assembles, as for internal/fleettest and
// `teamster dev`: a private redis-server process (or, for the topology
// scenario, a Sentinel set or a Redis Cluster, bench/topology.go), an
// embedded NATS with JetStream on a loopback port (the child worker of the
// memory scenario connects to it), one router and workers, each with its
// own NATS connection and Redis client, the way cmd/router and cmd/worker
// connect (cmdutil.Common.NewRedis: default go-redis options), counted by
// the bench's round-trip hooks.

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
	r, err := assembly.StartRedis(filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	s := &servers{dir: dir, redis: r}
	s.nodes, _ = s.findNodes(context.Background())
	return s, nil
}

func (s *servers) startNATS() error {
	srv, err := assembly.StartNATS(0, filepath.Join(s.dir, "jetstream"))
	if err != nil {
		return err
	}
	s.nats = srv
	s.natsURL = assembly.NATSURL(srv)
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
		assembly.StopNATS(s.nats)
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

// fleet is a router and workers in this process (internal/fleet), and a
// client.
type fleet struct {
	srv     *servers
	fl      *assembly.Fleet
	rt      *rtCounter // on the router's and the workers' Redis clients (a cluster client's node clients)
	issued  *rtCounter // on the router's and the workers' cluster clients themselves; nil unless cluster mode
	router  *router.Router
	workers []*worker.Worker
	client  *client.Client
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
	f := &fleet{srv: srv, rt: &rtCounter{}, slots: slots}
	if srv.mode == topoCluster {
		f.issued = &rtCounter{}
	}
	f.fl = assembly.New(assembly.Options{
		NATSURL:         srv.natsURL,
		NATSOptions:     []nats.Option{nats.ReconnectWait(250 * time.Millisecond)},
		Redis:           srv.fleetRedis(),
		InstrumentRedis: instrument(f.rt, f.issued),
		Logger:          quietLogger(),
		// The bench's redis-server is its own and fresh: no lease of an
		// earlier epoch can exist, so no quarantine after its "data loss"
		// (which would hold every first claim for one lease TTL).
		Workers: assembly.WorkerTuning{FreshRedis: true},
	})
	var err error
	if f.router, err = f.fl.StartRouter(ctx, assembly.RouterOptions{}); err != nil {
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
	nc, err := f.fl.ConnectNATS("bench-client", nats.CustomInboxPrefix(clientInbox))
	if err != nil {
		f.close()
		return nil, err
	}
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

func (f *fleet) startWorker(ctx context.Context, cfg *worker.Config) (*worker.Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w, err := f.fl.StartWorker(ctx, cfg)
	if err != nil {
		return nil, err
	}
	f.workers = append(f.workers, w)
	return w, nil
}

// waitManifests waits until the router sees, for every harness id, at least
// that many live workers advertising it.
func (f *fleet) waitManifests(want map[string]int, timeout time.Duration) error {
	return f.fl.WaitHarnesses(context.Background(), want, timeout)
}

// close stops everything in reverse order of start; a second call does
// nothing.
func (f *fleet) close() { f.fl.Close() }

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
