package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/natsproc"
	"github.com/teamster-fleet/teamster/internal/redisproc"
	"github.com/teamster-fleet/teamster/worker"
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

// ready reports whether the daemon's /readyz answers 200.
func (d *daemon) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metrics+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitReady waits until the daemon is ready, or fails when it exits first.
func (d *daemon) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if d.ready(ctx) {
			return nil
		}
		if !d.running() {
			return fmt.Errorf("%s exited (see %s)", d.name, d.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (see %s)", d.name, timeout, d.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
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

// redisArgs are the daemons' Redis flags for the fleet's topology.
func (f *fleet) redisArgs() []string {
	switch {
	case f.sentinel != nil:
		return []string{"--redis-mode", "sentinel", "--redis-url", f.sentinel.URL()}
	case f.cluster != nil:
		return []string{"--redis-mode", "cluster", "--redis-url", f.cluster.URL()}
	}
	return []string{"--redis-url", f.redis.URL()}
}

// streamArgs are the daemons' JetStream flags: three replicas on a cluster.
func (f *fleet) streamArgs() []string {
	if f.natsCluster != nil {
		return []string{"--stream-replicas", "3"}
	}
	return nil
}

func (f *fleet) newRouter(id string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &daemon{id: id, metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	args := append([]string{"--nats-url", f.natsURL(), "--metrics-addr", d.metrics}, f.redisArgs()...)
	d.proc = newProc("router "+id, f.p.bins.router(), filepath.Join(f.p.dir, "router-"+id+".log"),
		append(args, f.streamArgs()...)...)
	return d, nil
}

func (f *fleet) newWorker(id string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := worker.DevConfig(id, f.p.slots)
	cfg.LeaseTTLMs = f.p.leaseTTL.Milliseconds()
	cfg.DrainTimeoutMs = f.p.drainTimeout.Milliseconds()
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(f.p.dir, "worker-"+id+".json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, err
	}
	natsURL, redisArgs := f.natsURL(), f.redisArgs()
	if id == f.p.natsProxyFor {
		natsURL = "nats://" + f.natsProxy.Addr()
	}
	if id == f.p.redisProxyFor {
		redisArgs = []string{"--redis-url", "redis://" + f.redisProxy.Addr() + "/0"}
	}
	d := &daemon{id: id, metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	args := append([]string{"--nats-url", natsURL, "--config", path, "--ledger", f.ledger,
		"--metrics-addr", d.metrics}, redisArgs...)
	d.proc = newProc("worker "+id, f.p.bins.worker(), filepath.Join(f.p.dir, "worker-"+id+".log"),
		append(args, f.streamArgs()...)...)
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
