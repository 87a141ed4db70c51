package router_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/internal/natsproc"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/worker"
)

// clusterFleet is a fleet on a real 3-node NATS cluster (natsproc: one
// nats-server process per node) with R3 streams: routers and workers, each
// on a connection of its own whose first server the test picks, so that it
// knows who loses a connection when a node dies.
type clusterFleet struct {
	t       *testing.T
	nats    *natsproc.Cluster
	redis   *testenv.Redis
	log     *logrus.Logger
	logs    *logCounter
	ledger  *scripted.MemoryLedger
	routers []*router.Router
	workers []*worker.Worker
}

func startClusterFleet(t *testing.T) *clusterFleet {
	t.Helper()
	c, err := natsproc.StartCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	f := &clusterFleet{t: t, nats: c, redis: testenv.NewRedis(t), logs: newLogCounter(), ledger: &scripted.MemoryLedger{}}
	f.log = logrus.New()
	f.log.SetOutput(io.Discard)
	f.log.AddHook(f.logs)
	// A failed test shows what the servers said about leaders (the
	// directory goes with the test).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, nd := range c.Nodes() {
			b, err := os.ReadFile(nd.LogPath())
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "leader") || strings.Contains(line, "natsproc") {
					t.Logf("%s: %s", nd.Name(), line)
				}
			}
		}
	})
	return f
}

// connect opens a connection that tries node first (then the others, in
// order) and reconnects forever, as cmdutil.ConnectNATS's do.
func (f *clusterFleet) connect(name string, first int) *nats.Conn {
	f.t.Helper()
	urls := []string{f.nats.Node(first).URL()}
	for i := 0; i < f.nats.Len(); i++ {
		if i != first {
			urls = append(urls, f.nats.Node(i).URL())
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name(name), nats.DontRandomize(),
		nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			f.log.WithField("conn", name).Warn("nats: " + err.Error())
		}))
	if err != nil {
		f.t.Fatal(err)
	}
	if got := nc.ConnectedServerName(); got != f.nats.Node(first).Name() {
		f.t.Fatalf("%s connected to %s, want %s", name, got, f.nats.Node(first).Name())
	}
	f.t.Cleanup(nc.Close)
	return nc
}

func (f *clusterFleet) redisClient() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	f.t.Cleanup(func() { rdb.Close() })
	return rdb
}

func (f *clusterFleet) startRouter(name string, first int) *router.Router {
	f.t.Helper()
	r, err := router.New(router.Params{NATS: f.connect(name, first), Redis: f.redisClient(),
		Logger: f.log.WithField("proc", name), ReaperInterval: 200 * time.Millisecond,
		Streams: bus.StreamOptions{Replicas: 3}})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(r.Stop)
	f.routers = append(f.routers, r)
	return r
}

func (f *clusterFleet) startWorker(id string, first int) *worker.Worker {
	f.t.Helper()
	cfg := worker.DevConfig(id, 64)
	cfg.NewEpochQuarantineMs = -1 // the Redis is fresh
	nc := f.connect(id, first)
	w, err := worker.New(worker.Params{Config: cfg, NATS: nc, Redis: f.redisClient(), Logger: f.log.WithField("proc", id),
		Env: worker.FactoryEnv{Ledger: f.ledger}, Streams: bus.StreamOptions{Replicas: 3}})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if w.Drain(ctx) != nil {
			w.Kill()
		}
	})
	f.workers = append(f.workers, w)
	return w
}

// waitRegistered waits until every router sees n live workers.
func (f *clusterFleet) waitRegistered(ctx context.Context, n int) error {
	return waitFor(ctx, func() error {
		for i, r := range f.routers {
			if got := r.LiveWorkers(); got < n {
				return fmt.Errorf("router %d sees %d workers, want %d", i, got, n)
			}
		}
		return nil
	})
}

// waitFor retries op until it succeeds or ctx ends (a liveness bound, not a
// timing assertion).
func waitFor(ctx context.Context, op func() error) error {
	var last error
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(20*time.Millisecond),
		backoff.WithMaxInterval(250*time.Millisecond), backoff.WithMaxElapsedTime(0))
	err := backoff.Retry(func() error { last = op(); return last }, backoff.WithContext(bo, ctx))
	if err != nil && last != nil {
		return fmt.Errorf("%w: %w", err, last)
	}
	return err
}

// logCounter counts log messages by their text.
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
	errs   []string
	// maxWaited and maxTries are the most of the "waited" and "tries"
	// fields of the messages that have them (a publish after failed tries).
	maxWaited time.Duration
	maxTries  int
}

func newLogCounter() *logCounter { return &logCounter{counts: map[string]int{}} }

func (l *logCounter) Levels() []logrus.Level { return logrus.AllLevels }

func (l *logCounter) Fire(e *logrus.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[e.Message]++
	if d, ok := e.Data["waited"].(time.Duration); ok {
		l.maxWaited = max(l.maxWaited, d)
	}
	if n, ok := e.Data["tries"].(int); ok {
		l.maxTries = max(l.maxTries, n)
	}
	if e.Level <= logrus.ErrorLevel && len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf("%s %v", e.Message, e.Data))
	}
	return nil
}

// count is how many messages containing s were logged.
func (l *logCounter) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for m, c := range l.counts {
		if strings.Contains(m, s) {
			n += c
		}
	}
	return n
}

// submitted is one submit of the load.
type submitted struct {
	h   *client.Handle
	err error
}

// The node leading TEAMSTER_ATTEMPTS is killed with SIGKILL while eight
// loops submit through the Go client. The node is the first server of one
// router, one worker and the client, which all lose their connections; the
// other router and worker are on the other nodes. The stream elects a
// leader among the two others, and every submit is accepted (none
// rejected: the router goes on publishing through the election, the
// client sends a submit whose reply was lost again with the same attempt
// id), and every accepted attempt ran once and has exactly one result. The
// node then comes back on its store, and the fleet works on.
func TestSubmitsRideOutTheLossOfTheAttemptsLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a node of a NATS cluster and waits out the election")
	}
	f := startClusterFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The streams first, to know which node leads the attempts.
	setup := f.connect("setup", 0)
	js, err := jetstream.New(setup)
	if err != nil {
		t.Fatal(err)
	}
	// A cluster just formed may take a while to place three replicas under
	// a loaded machine; the routers retry the same way (setupBudget).
	err = bus.RetryTransient(ctx, time.Minute, func(err error) { t.Logf("setup not done yet: %v", err) }, func(ctx context.Context) error {
		_, _, err := bus.Setup(ctx, js, bus.StreamOptions{Replicas: 3})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	leader, err := f.nats.StreamLeader(ctx, bus.StreamAttempts)
	if err != nil {
		t.Fatal(err)
	}
	other := (leader + 1) % 3
	setup.Close()

	f.startRouter("router-on-leader", leader)
	f.startRouter("router-elsewhere", other)
	f.startWorker("w-on-leader", leader)
	f.startWorker("w-elsewhere", (leader+2)%3)
	if err := f.waitRegistered(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// The node leads everything the attempt path uses: the results stream,
	// the registry bucket and the workers' consumer too, so its loss means
	// an election for each.
	for _, stream := range []string{bus.StreamResults, "KV_" + bus.BucketWorkers} {
		if err := f.nats.MoveStreamLeader(ctx, stream, leader); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.nats.MoveConsumerLeader(ctx, bus.StreamAttempts, bus.ConsumerName("codex"), leader); err != nil {
		t.Fatal(err)
	}
	if l, err := f.nats.StreamLeader(ctx, bus.StreamAttempts); err != nil || l != leader {
		t.Fatalf("attempts leader %d (%v), want %d", l, err, leader)
	}
	cnc := f.connect("client", leader)
	c, err := client.New(cnc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Until the loops stop, the client's connection carries only submit
	// requests: what it sent beyond one per submit was sent again.
	outBefore := cnc.Stats().OutMsgs

	var (
		mu    sync.Mutex
		subs  []submitted
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		seq   atomic.Int64
		worst atomic.Int64 // the longest submit, ns
	)
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				n := seq.Add(1)
				a := fleettest.Attempt(fmt.Sprintf("s-%d", n), fmt.Sprintf("hello %d", n))
				sctx, scancel := context.WithTimeout(ctx, time.Minute)
				start := time.Now()
				h, err := c.Submit(sctx, a)
				scancel()
				if d := int64(time.Since(start)); d > worst.Load() {
					worst.Store(d)
				}
				mu.Lock()
				subs = append(subs, submitted{h, err})
				mu.Unlock()
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(subs) }
	if err := waitFor(ctx, func() error {
		if n := count(); n < 50 {
			return fmt.Errorf("%d submits so far", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	killed := f.nats.Node(leader)
	before := count()
	killedAt := time.Now()
	if err := killed.Kill(); err != nil {
		t.Fatal(err)
	}
	next, err := f.nats.StreamLeader(ctx, bus.StreamAttempts)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Since(killedAt)
	if next == leader {
		t.Fatalf("the killed node %s still leads", killed.Name())
	}
	// Submits go on for a while after the election, then the loops stop
	// and every submit in flight is answered (those whose reply was lost
	// after their resubmit).
	afterElection := count()
	if err := waitFor(ctx, func() error {
		if n := count(); n < afterElection+50 {
			return fmt.Errorf("%d submits since the election", n-afterElection)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	total := count()
	resent := int(cnc.Stats().OutMsgs-outBefore) - total

	retried := f.logs.count("attempt published after failed tries")
	f.logs.mu.Lock()
	maxWaited, maxTries := f.logs.maxWaited, f.logs.maxTries
	f.logs.mu.Unlock()
	t.Logf("%d submits (%d between the kill and stream info naming the new leader, %s); "+
		"%d publishes went through after failed tries (at most %d tries, %s); "+
		"the client sent %d submit requests again; the longest submit took %s; router errors: %d",
		total, afterElection-before, elected.Round(time.Millisecond), retried, maxTries, maxWaited, resent,
		time.Duration(worst.Load()).Round(time.Millisecond), f.logs.count("submit failed"))
	accepted := map[string]*client.Handle{}
	for _, s := range subs {
		if s.err != nil {
			var rej *client.RejectedError
			if errors.As(s.err, &rej) {
				t.Errorf("submit rejected: %v (%+v)", s.err, rej.Reply)
			} else {
				t.Errorf("submit failed: %v", s.err)
			}
			continue
		}
		if s.h.Reply.Status != bus.StatusAccepted {
			t.Errorf("submit answered %s, want accepted", s.h.Reply.Status)
			continue
		}
		if accepted[s.h.AttemptID()] != nil {
			t.Errorf("attempt id %s accepted twice", s.h.AttemptID())
		}
		accepted[s.h.AttemptID()] = s.h
	}
	if t.Failed() {
		t.Fatalf("%d of %d submits not accepted; router errors: %v", total-len(accepted), total, f.logs.errs)
	}

	// Every accepted attempt has its result: by event or from the durable
	// stream, ok, and for that attempt.
	for id, h := range accepted {
		r := fleettest.Result(t, h)
		if r.AttemptID != id || r.Status != "ok" {
			t.Errorf("result of %s: %s for %s (%v)", id, r.Status, r.AttemptID, r.Error)
		}
		h.Close()
	}
	// Each ran once: one start in the ledger per attempt, none for an
	// attempt that was not accepted.
	starts := map[string]int{}
	for _, e := range f.ledger.Entries() {
		if e.Event == scripted.EventStart {
			starts[e.Attempt]++
		}
	}
	for id, n := range starts {
		if accepted[id] == nil {
			t.Errorf("attempt %s ran but was never accepted", id)
		}
		if n != 1 {
			t.Errorf("attempt %s ran %d times", id, n)
		}
	}
	if len(starts) != len(accepted) {
		t.Errorf("%d attempts ran, %d accepted", len(starts), len(accepted))
	}
	if retried == 0 && resent == 0 {
		t.Fatal("no submit met the election: the test tested nothing")
	}

	// Both routers still follow the registry and both workers still fetch:
	// with the node back on its store, a new round of attempts runs.
	if err := f.waitRegistered(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	if err := f.nats.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// Rounds of attempts until each worker ran one: the worker that lost
	// its connection fetches again too.
	round := 0
	if err := waitFor(ctx, func() error {
		round++
		var hs []*client.Handle
		for i := 0; i < 10; i++ {
			hs = append(hs, fleettest.Submit(t, c, fleettest.Attempt(fmt.Sprintf("after-%d-%d", round, i), "after")))
		}
		for _, h := range hs {
			if r := fleettest.Result(t, h); r.Status != "ok" {
				return backoff.Permanent(fmt.Errorf("after the restart: %s %v", r.Status, r.Error))
			}
		}
		ran := map[string]bool{}
		for _, e := range f.ledger.Entries() {
			if e.Event == scripted.EventStart && strings.HasPrefix(e.Session, "after-") {
				ran[e.Worker] = true
			}
		}
		if len(ran) < len(f.workers) {
			return fmt.Errorf("attempts ran on %d workers since the restart", len(ran))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
