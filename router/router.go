// Package router is teamster's router daemon as a library: it serves
// teamster.submit in queue group "routers" (validate, select, record, publish,
// reply) and runs the reaper. Routers own nothing durable; any number run.
// cmd/router is a thin main around it; tests start it in-process.
package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/gopool"
	"github.com/teamster-fleet/teamster/internal/logging"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
)

// Params are what a router needs. It uses, but does not own, the NATS
// connection and the Redis client.
type Params struct {
	NATS  *nats.Conn
	Redis redis.UniversalClient
	// Policy is the runtime policy (OpenClaw's config shape); nil is all auto.
	Policy *selection.Policy
	Logger logrus.FieldLogger
	// ReaperInterval is how often the reaper looks for due attempts;
	// default 1s.
	ReaperInterval time.Duration
	// Concurrency bounds the requests handled at once; default 256.
	Concurrency int
	// Metrics; nil records into unregistered collectors.
	Metrics *metrics.Router
	// Streams tunes the streams the router creates or updates (replicas).
	Streams bus.StreamOptions
	// RouterID names the router in KV TEAMSTER_ROUTERS, its logs and the
	// records it writes; default "r-" and a ULID (which sort by start time).
	RouterID string
	// QuietAttempts logs each accepted attempt at debug instead of info,
	// for fleets whose rates make a line per attempt too much.
	QuietAttempts bool
	// Version is the router's build version, advertised in its entry.
	Version string
	// AttemptRetention is how long finished attempt records stay in Redis
	// (resubmits within it are answered from the record); 0 is
	// leases.FinishedTTL. Give routers and workers the same value.
	AttemptRetention time.Duration
}

// Router serves submits and reaps.
type Router struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *leases.Store
	policy *selection.Policy
	log    logrus.FieldLogger
	sem    chan struct{}
	// handlers runs the requests, on goroutines kept for reuse.
	handlers *gopool.Pool
	m        *metrics.Router
	rdb      redis.UniversalClient
	// state is the object store of sessions' native state, whose objects
	// a session reset or delete removes.
	state   *bus.NativeState
	streams bus.StreamOptions
	// debug says the logger logs at debug level: the selection record is
	// only assembled into log fields then.
	debug bool
	steps logging.Lifecycle

	id       string
	version  string
	digest   string // the policy's (selection.Policy.Digest)
	started  time.Time
	registry *registryView
	reaper   *reaper
	nodes    *nodeWatcher
	beat     *heartbeat
	// consumers makes the harnesses' consumers (consumers.go).
	consumers *consumerMaker

	mu       sync.Mutex
	subs     []*nats.Subscription
	inflight sync.WaitGroup
}

// New builds a router; Start runs it.
func New(p Params) (*Router, error) {
	if p.NATS == nil || p.Redis == nil {
		return nil, errors.New("router: NATS and Redis are required")
	}
	if p.Logger == nil {
		p.Logger = logrus.StandardLogger()
	}
	if p.ReaperInterval <= 0 {
		p.ReaperInterval = time.Second
	}
	if p.Concurrency <= 0 {
		p.Concurrency = 256
	}
	if p.Metrics == nil {
		p.Metrics = metrics.NewRouter(nil)
	}
	if p.RouterID == "" {
		p.RouterID = "r-" + ulid.Make().String()
	}
	if err := bus.CheckID("router id", p.RouterID); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	if err := leases.CheckRetention(p.AttemptRetention); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	js, err := jetstream.New(p.NATS)
	if err != nil {
		return nil, fmt.Errorf("router: jetstream: %w", err)
	}
	r := &Router{nc: p.NATS, js: js, store: leases.NewStore(p.Redis, leases.WithRetention(p.AttemptRetention)), policy: p.Policy, m: p.Metrics, rdb: p.Redis, streams: p.Streams,
		log: p.Logger.WithFields(logrus.Fields{"component": "router", "router": p.RouterID}), sem: make(chan struct{}, p.Concurrency),
		handlers: gopool.New(handlerIdle), id: p.RouterID, version: p.Version, started: time.Now()}
	r.digest = p.Policy.Digest()
	p.Metrics.Policy.WithLabelValues(r.digest).Set(1)
	r.debug = logging.DebugEnabled(p.Logger)
	r.steps = logging.NewLifecycle(p.Logger, p.QuietAttempts)
	r.reaper = newReaper(reaperParams{store: r.store, js: js, nc: p.NATS, interval: p.ReaperInterval, log: r.log, m: p.Metrics})
	r.nodes = newNodeWatcher(nodeWatcherParams{store: r.store, interval: nodeWatchInterval, log: r.log, m: p.Metrics})
	return r, nil
}

// setupBudget is how long a starting router or worker retries the
// JetStream setup (streams, bucket, consumers) while JetStream does not
// answer.
const setupBudget = time.Minute

// handlerIdle is how long a request's goroutine waits for the next request
// before it ends.
const handlerIdle = 5 * time.Second

// Start sets up the streams, loads the scripts, starts watching the registry,
// subscribes the router's subjects and starts the reaper.
func (r *Router) Start(ctx context.Context) error {
	// A cluster still forming, or electing a stream's leader, does not
	// answer in time: the setup is tried again for a while, logged.
	var kv, routers jetstream.KeyValue
	err := bus.RetryTransient(ctx, setupBudget, func(err error) {
		r.log.Warn("JetStream setup not done yet; trying again: " + err.Error())
	}, func(ctx context.Context) error {
		var err error
		kv, routers, err = bus.Setup(ctx, r.js, r.streams)
		return err
	})
	if err != nil {
		return fmt.Errorf("router: %w", err)
	}
	if r.state, err = bus.OpenNativeState(ctx, r.js); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	if err := r.store.Load(ctx); err != nil {
		return fmt.Errorf("router: redis: %w", err)
	}
	r.consumers = newConsumerMaker(r.js, r.log)
	r.registry, err = watchRegistry(ctx, kv, r.log, r.consumers.saw)
	if err != nil {
		return fmt.Errorf("router: registry: %w", err)
	}
	r.consumers.start()
	// Every subject a gateway sends on is served in its plain form (the
	// unnamed tenant's) and its identified form (a gateway's own, which the
	// shipped permissions let only that gateway publish).
	for _, s := range []struct {
		subject   string
		delegates bool
		h         func(*nats.Msg, caller)
	}{
		{bus.SubjectSubmit, false, r.submit},
		{bus.SubjectSubmitDelegates, true, r.submit},
		{bus.SubjectRunInjects, false, r.onRunRequest},
		{bus.SubjectRunCancels, false, r.onRunRequest},
		{bus.SubjectRunReads, false, r.onRunRequest},
		{bus.SubjectSessionOps, false, r.onSessionOp},
		{bus.SubjectInject, false, r.onInject},
		{bus.SubjectSourceGrant, false, r.onSourceGrant},
		{bus.SubjectSourceRevoke, false, r.onSourceRevoke},
		{bus.SubjectGetResult, false, r.onGetResult},
		{bus.SubjectGetHarnesses, false, r.onGetHarnesses},
	} {
		if err := r.serve(s.subject, plain, s.delegates, s.h); err != nil {
			return err
		}
		if err := r.serve(bus.IdentifiedPattern(s.subject), identified, s.delegates, s.h); err != nil {
			return err
		}
	}
	r.reaper.start()
	r.nodes.start()
	r.beat = newHeartbeat(heartbeatParams{id: r.id, kv: routers, js: r.js, log: r.log, m: r.m, harness: r.harnessIDs,
		entry: bus.RouterEntry{V: bus.Version, RouterID: r.id, Version: r.version, PolicyDigest: r.digest, StartedMs: r.started.UnixMilli()}})
	r.beat.start()
	r.log.WithFields(logrus.Fields{"policy": r.digest, "version": r.version}).Info("router serving")
	return nil
}

// serve subscribes subject in queue group routers; each request is handled
// in its own goroutine, at most Concurrency at once, once admit has named
// its caller and checked its reply subject.
func (r *Router) serve(subject string, k kind, delegates bool, h func(*nats.Msg, caller)) error {
	sub, err := r.nc.QueueSubscribe(subject, bus.QueueRouters, func(m *nats.Msg) {
		r.sem <- struct{}{}
		r.inflight.Add(1)
		r.handlers.Go(func() {
			defer func() { <-r.sem; r.inflight.Done() }()
			if c, ok := r.admit(m, k, delegates); ok {
				h(m, c)
			}
		})
	})
	if err != nil {
		return fmt.Errorf("router: subscribe %s: %w", subject, err)
	}
	// Bodies up to 8 MiB may arrive; the router refuses them itself.
	_ = sub.SetPendingLimits(64*1024, 256<<20)
	r.mu.Lock()
	r.subs = append(r.subs, sub)
	r.mu.Unlock()
	return nil
}

// Stop stops serving (queued requests go to other routers), finishes the
// requests in hand, stops the reaper and the registry watch.
func (r *Router) Stop() {
	r.mu.Lock()
	subs := r.subs
	r.subs = nil
	r.mu.Unlock()
	for _, s := range subs {
		_ = s.Drain()
	}
	r.inflight.Wait()
	r.handlers.Close()
	r.reaper.stop()
	r.nodes.stop()
	if r.beat != nil {
		r.beat.stop()
	}
	if r.registry != nil {
		r.registry.stop()
	}
	if r.consumers != nil {
		r.consumers.stop()
	}
}

// Ready reports why the router cannot serve, nil when NATS and Redis answer.
func (r *Router) Ready(ctx context.Context) error {
	if !r.nc.IsConnected() {
		return errors.New("NATS is not connected")
	}
	if err := r.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// LiveWorkers is the number of workers (active or draining) the router
// counts as registered now.
func (r *Router) LiveWorkers() int {
	n := 0
	for _, e := range r.registry.live() {
		if e.Live() {
			n++
		}
	}
	return n
}

// ID is the router's id.
func (r *Router) ID() string { return r.id }

// harnessIDs are the ids of the harnesses live workers host.
func (r *Router) harnessIDs() []string {
	var ids []string
	for _, m := range r.registry.manifests() {
		ids = append(ids, m.ID)
	}
	return ids
}

// Manifests returns the harness manifests live workers advertise now.
func (r *Router) Manifests() []selection.Manifest { return r.registry.manifests() }

var errWatchClosed = errors.New("registry watch closed")
