package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	// Imported as assembly: this package's own fleet type is the fleet of
	// processes under test.
	assembly "github.com/teamster-fleet/teamster/internal/fleet"
	"github.com/teamster-fleet/teamster/internal/natsproc"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

func init() {
	// go-redis logs failovers it follows and dials that fail while the
	// suite kills servers: the suite reports what matters itself.
	redis.SetLogger(quietRedis{})
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// fleetParams shape one scenario's fleet.
type fleetParams struct {
	dir          string
	bins         binaries
	routers      int
	workers      int
	slots        int
	leaseTTL     time.Duration
	drainTimeout time.Duration
	// redisProxyFor and natsProxyFor name a worker whose connection to Redis
	// (or NATS) goes through a proxy the suite can partition (standalone
	// Redis and a single NATS server only).
	redisProxyFor string
	natsProxyFor  string
	// redisTopology is standalone (""), sentinel (a primary, one replica,
	// three Sentinels) or cluster (three masters with a replica each).
	redisTopology string
	// natsNodes is 1 (one server) or 3 (a cluster, streams with 3 replicas).
	natsNodes int
}

// Redis topologies of a fleet.
const (
	topologySentinel = "sentinel"
	topologyCluster  = "cluster"
)

// daemon is a router or worker process with its metrics address, whose
// /readyz says when it serves.
type daemon struct {
	*proc
	id      string
	metrics string
}

// waitReady waits until the daemon is ready (internal/fleet's readiness
// wait on its /readyz), or fails when it exits first.
func (d *daemon) waitReady(ctx context.Context, timeout time.Duration) error {
	err := assembly.Wait(ctx, timeout, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		if assembly.Readyz(ctx, d.metrics) == nil {
			return true, nil
		}
		if !d.running() {
			return false, fmt.Errorf("%s exited (see %s)", d.name, d.logPath)
		}
		return false, nil
	})
	if errors.Is(err, assembly.ErrTimeout) {
		return fmt.Errorf("%s not ready after %s (see %s)", d.name, timeout, d.logPath)
	}
	return err
}

// fleet is a whole teamster fleet of real processes: a nats-server, a
// redis-server, routers and workers, and the suite's own connections.
type fleet struct {
	p           fleetParams
	nats        *natsServer       // a single NATS server, or nil
	natsCluster *natsproc.Cluster // or a three-node cluster
	redis       *redisproc.Redis  // a standalone Redis, or nil
	sentinel    *redisproc.SentinelSet
	cluster     *redisproc.Cluster
	routers     []*daemon
	workers     []*daemon
	redisProxy  *proxy
	natsProxy   *proxy
	ledger      string

	nc     *nats.Conn
	client *client.Client
	rdb    redis.UniversalClient
}

// startFleet starts every process and waits until each is ready.
func startFleet(ctx context.Context, p fleetParams) (f *fleet, err error) {
	f = &fleet{p: p, ledger: filepath.Join(p.dir, "ledger.jsonl")}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	for _, sub := range []string{"nats", "redis"} {
		if err = os.MkdirAll(filepath.Join(p.dir, sub), 0o755); err != nil {
			return f, err
		}
	}
	if p.natsNodes == 3 {
		if f.natsCluster, err = natsproc.StartCluster(filepath.Join(p.dir, "nats"), 3); err != nil {
			return f, err
		}
		if err = f.natsCluster.WaitReady(ctx); err != nil {
			return f, err
		}
	} else if f.nats, err = startNATS(ctx, p.bins.nats(), p.dir); err != nil {
		return f, err
	}
	switch p.redisTopology {
	case topologySentinel:
		// Sentinel declares the primary down after 1s without an answer.
		f.sentinel, err = redisproc.StartSentinelSet(filepath.Join(p.dir, "redis"), redisproc.SentinelOptions{DownAfter: time.Second})
	case topologyCluster:
		f.cluster, err = redisproc.StartCluster(filepath.Join(p.dir, "redis"), redisproc.ClusterOptions{})
	default:
		f.redis, err = redisproc.Start(p.dir)
	}
	if err != nil {
		return f, err
	}
	if p.redisProxyFor != "" {
		if f.redisProxy, err = newProxy(f.redis.Addr()); err != nil {
			return f, err
		}
	}
	if p.natsProxyFor != "" {
		if f.natsProxy, err = newProxy(f.nats.Addr()); err != nil {
			return f, err
		}
	}
	for i := 1; i <= p.routers; i++ {
		d, err := f.newRouter(fmt.Sprintf("r%d", i))
		if err != nil {
			return f, err
		}
		f.routers = append(f.routers, d)
	}
	for i := 1; i <= p.workers; i++ {
		d, err := f.newWorker(fmt.Sprintf("w%d", i))
		if err != nil {
			return f, err
		}
		f.workers = append(f.workers, d)
	}
	for _, d := range append(append([]*daemon{}, f.routers...), f.workers...) {
		if err := d.start(); err != nil {
			return f, err
		}
	}
	for _, d := range append(append([]*daemon{}, f.routers...), f.workers...) {
		if err := d.waitReady(ctx, 30*time.Second); err != nil {
			return f, err
		}
	}
	f.nc, err = nats.Connect(f.natsURL(), nats.Name("chaos-client"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second),
		// Write errors while the suite kills the server are expected; the
		// default handler would print them.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return f, err
	}
	if f.client, err = client.New(f.nc); err != nil {
		return f, err
	}
	switch {
	case f.sentinel != nil:
		f.rdb = f.sentinel.Client()
	case f.cluster != nil:
		f.rdb = f.cluster.Client()
	default:
		f.rdb = redis.NewClient(&redis.Options{Addr: f.redis.Addr(), MaxRetries: -1})
	}
	return f, nil
}

// natsURL is what the daemons and the suite connect to: the server, or
// every node of the cluster.
func (f *fleet) natsURL() string {
	if f.natsCluster != nil {
		return f.natsCluster.URLs()
	}
	return f.nats.URL()
}

// daemons is how the daemons reach the fleet, as internal/fleet's Options
// describe an in-process fleet: NATS (the server, or every node of the
// cluster), Redis in the fleet's topology, and three stream replicas on a
// NATS cluster.
func (f *fleet) daemons() assembly.Options {
	o := assembly.Options{NATSURL: f.natsURL()}
	switch {
	case f.sentinel != nil:
		o.Redis = cmdutil.Common{RedisMode: cmdutil.RedisSentinel, RedisURL: f.sentinel.URL()}
	case f.cluster != nil:
		o.Redis = cmdutil.Common{RedisMode: cmdutil.RedisCluster, RedisURL: f.cluster.URL()}
	default:
		o.Redis = cmdutil.Common{RedisURL: f.redis.URL()}
	}
	if f.natsCluster != nil {
		o.Streams.Replicas = 3
	}
	return o
}

func (f *fleet) newRouter(id string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &daemon{id: id, metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	args := append(f.daemons().DaemonArgs(), "--metrics-addr", d.metrics)
	d.proc = newProc("router "+id, f.p.bins.router(), filepath.Join(f.p.dir, "router-"+id+".log"), args...)
	return d, nil
}

// newWorker is a worker process: internal/testworker (cmd/worker with the
// ledger) with the dev harnesses, the scenario's lease TTL and drain
// timeout (internal/fleet's WorkerTuning; the quarantine after a Redis data
// loss stays on, the Redis scenarios check it), recording its runs in the
// fleet's ledger.
func (f *fleet) newWorker(id string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := assembly.WorkerTuning{LeaseTTL: f.p.leaseTTL, DrainTimeout: f.p.drainTimeout}.DevWorker(id, f.p.slots)
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(f.p.dir, "worker-"+id+".json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, err
	}
	o := f.daemons()
	if id == f.p.natsProxyFor {
		o.NATSURL = "nats://" + f.natsProxy.Addr()
	}
	if id == f.p.redisProxyFor {
		o.Redis = cmdutil.Common{RedisURL: "redis://" + f.redisProxy.Addr() + "/0"}
	}
	d := &daemon{id: id, metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	args := append(o.DaemonArgs(), "--config", path, "--ledger", f.ledger, "--metrics-addr", d.metrics)
	d.proc = newProc("worker "+id, f.p.bins.worker(), filepath.Join(f.p.dir, "worker-"+id+".log"), args...)
	return d, nil
}

// worker returns the worker with id.
func (f *fleet) worker(id string) *daemon {
	for _, d := range f.workers {
		if d.id == id {
			return d
		}
	}
	return nil
}

// restart starts a daemon that exited (killed or drained) and waits until it
// is ready.
func (f *fleet) restart(ctx context.Context, d *daemon) error {
	if d.running() {
		return fmt.Errorf("%s is still running", d.name)
	}
	if err := d.start(); err != nil {
		return err
	}
	return d.waitReady(ctx, 30*time.Second)
}

// drain sends SIGTERM to a worker and waits for it to exit; it returns the
// exit code.
func (f *fleet) drain(d *daemon) (int, error) {
	if err := d.signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	return d.wait(f.p.drainTimeout + 30*time.Second)
}

// stop kills every process (the suite has read what it needs by then) and
// closes the suite's connections.
func (f *fleet) stop() {
	if f.nc != nil {
		f.nc.Close()
	}
	if f.rdb != nil {
		f.rdb.Close()
	}
	var errs []error
	for _, d := range f.workers {
		_ = d.signal(syscall.SIGCONT) // a paused worker must not outlive the suite
		errs = append(errs, d.kill())
	}
	for _, d := range f.routers {
		errs = append(errs, d.kill())
	}
	if f.natsProxy != nil {
		f.natsProxy.Close()
	}
	if f.redisProxy != nil {
		f.redisProxy.Close()
	}
	if f.nats != nil {
		errs = append(errs, f.nats.kill())
	}
	if f.natsCluster != nil {
		f.natsCluster.Close()
	}
	if f.redis != nil {
		errs = append(errs, f.redis.Kill())
	}
	if f.sentinel != nil {
		f.sentinel.Close()
	}
	if f.cluster != nil {
		f.cluster.Close()
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: stopping the fleet:", err)
	}
}
