package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/leases"
)

// config sizes a suite run: -short is the CI subset.
type config struct {
	sessions    int           // load sessions per scenario
	load        time.Duration // load runs at least this long
	warmup      time.Duration // load before the first fault
	tail        time.Duration // load after the last fault ended
	settle      time.Duration // quiet time after the results, for late duplicates
	resultBound time.Duration // how long after the load every result must be in
	// Attempts carry no queueTimeoutMs: the default (10 minutes) applies,
	// so an attempt the fleet strands shows as lost within resultBound
	// instead of as a late queue_timeout.
	submitBound   time.Duration // how long a submit may go without a definite answer
	recoveryBound time.Duration // the stated recovery time: a fresh attempt ok within it
	rounds        int           // faults per scenario
	burst         int           // concurrent submits around a router kill
	leaseTTL      time.Duration
	drainTimeout  time.Duration
	slots         int
	timeout       time.Duration // hard bound of one scenario
}

func fullConfig() config {
	return config{sessions: 36, load: 25 * time.Second, warmup: 4 * time.Second, tail: 6 * time.Second,
		settle: 6 * time.Second, resultBound: 60 * time.Second,
		submitBound: 30 * time.Second, recoveryBound: 20 * time.Second, rounds: 2, burst: 200,
		leaseTTL: 2 * time.Second, drainTimeout: 20 * time.Second, slots: 16, timeout: 5 * time.Minute}
}

func shortConfig() config {
	return config{sessions: 16, load: 8 * time.Second, warmup: 2 * time.Second, tail: 3 * time.Second,
		settle: 3 * time.Second, resultBound: 30 * time.Second,
		submitBound: 20 * time.Second, recoveryBound: 20 * time.Second, rounds: 1, burst: 200,
		leaseTTL: 2 * time.Second, drainTimeout: 15 * time.Second, slots: 16, timeout: 3 * time.Minute}
}

// scenario is one fault the suite injects into a fresh fleet under load.
type scenario struct {
	name string
	what string
	// fleet adjusts the fleet (routers, proxies).
	fleet func(*fleetParams)
	// allowed are the error codes an accepted attempt may end with here,
	// besides ok.
	allowed []teamster.Code
	// ledgerCheck is checkStepsAndLedger or checkStepsOnly.
	ledgerCheck string
	// oneEvent: NATS stays up, so every accepted attempt must have a result
	// event on its replyTo. In every scenario a second one may arrive only
	// as a reaper's resend (the same result, a later seq): the first to mark
	// an outcome published sends it, and a reaper sends it again only when
	// its sender did not confirm sending it within the send window
	// (ARCHITECTURE.md).
	oneEvent bool
	// steadySenders: no process that sends result events dies or stalls
	// (a drain), so no resend can happen and a second result event fails.
	steadySenders bool
	// noRefusals: a refused submit fails the scenario (a failover the
	// fleet rides out: submits keep being accepted).
	noRefusals bool
	// longTurns: the load's turns run about twice as long, so that more of
	// them are mid-run when the fault strikes.
	longTurns bool
	// tail, when longer than the config's, is how long the load goes on
	// after the last fault ended.
	tail time.Duration
	// inject injects the fault (cfg.rounds times), calling faultEnded when
	// each ends.
	inject func(ctx context.Context, sr *scenarioRun) error
}

// kill is a kill -9 of a worker: its open runs ended then.
type killed struct {
	worker string
	at     time.Time
}

// scenarioRun is one scenario in progress.
type scenarioRun struct {
	sc       *scenario
	cfg      config
	f        *fleet
	d        *driver
	r        *row
	sessions []*session
	verbose  bool

	mu        sync.Mutex
	kills     []killed
	lastEnd   time.Time
	probes    []probeResult
	probeWG   sync.WaitGroup
	lostEpoch map[string]bool
	// beforeStop run while the fleet still runs (Redis is readable); post
	// run after the checks, with the final ledger.
	beforeStop []func(ctx context.Context)
	post       []func(entries []scripted.Entry)
}

type probeResult struct {
	took time.Duration
	ok   bool
}

func (sr *scenarioRun) logf(format string, args ...any) {
	if sr.verbose {
		fmt.Fprintf(os.Stderr, "chaos: %s: %s\n", sr.sc.name, fmt.Sprintf(format, args...))
	}
}

// faultEnded records that a fault ended at end and starts a recovery probe.
func (sr *scenarioRun) faultEnded(ctx context.Context, end time.Time) {
	sr.mu.Lock()
	sr.lastEnd = end
	sr.mu.Unlock()
	sr.probeWG.Add(1)
	go func() {
		defer sr.probeWG.Done()
		took, ok := sr.d.probe(ctx, kindProbe, end, sr.cfg.recoveryBound)
		sr.logf("recovery probe: %s ok=%v", took.Round(time.Millisecond), ok)
		sr.mu.Lock()
		sr.probes = append(sr.probes, probeResult{took, ok})
		sr.mu.Unlock()
	}()
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// busyWorker waits up to 10s for a worker (one of ids, any when empty) with
// at least one run in flight and returns the busiest, with its runs.
func (sr *scenarioRun) busyWorker(ctx context.Context, ids ...string) (*daemon, []*attempt, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var best *daemon
		var runs []*attempt
		running := sr.d.t.running()
		for _, w := range sr.f.workers {
			if len(ids) > 0 && !contains(ids, w.id) {
				continue
			}
			if len(running[w.id]) > len(runs) && w.running() {
				best, runs = w, running[w.id]
			}
		}
		if best != nil && (len(runs) >= 2 || time.Now().After(deadline.Add(-5*time.Second))) {
			return best, runs, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, errors.New("no worker had a run in flight for 10s: the load is not reaching the workers")
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// killWorker kills a worker with SIGKILL and records when it was gone.
func (sr *scenarioRun) killWorker(w *daemon) (time.Time, error) {
	if err := w.kill(); err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	sr.mu.Lock()
	sr.kills = append(sr.kills, killed{w.id, at})
	sr.mu.Unlock()
	return at, nil
}

// extraEnds are end entries for the runs a kill -9 ended: every run of the
// killed worker that started before the kill and has no end.
func (sr *scenarioRun) extraEnds(entries []scripted.Entry) []scripted.Entry {
	type key struct{ session, attempt, worker, fence string }
	ended := map[key]bool{}
	for _, e := range entries {
		if e.Event == scripted.EventEnd {
			ended[key{e.Session, e.Attempt, e.Worker, e.Fence}] = true
		}
	}
	var out []scripted.Entry
	for _, e := range entries {
		k := key{e.Session, e.Attempt, e.Worker, e.Fence}
		if e.Event != scripted.EventStart || ended[k] {
			continue
		}
		for _, kl := range sr.kills {
			if kl.worker == e.Worker && e.TimeNs < kl.at.UnixNano() {
				end := e
				end.Event, end.TimeNs = scripted.EventEnd, kl.at.UnixNano()
				out = append(out, end)
				ended[k] = true
				break
			}
		}
	}
	return out
}

// runScenario runs one scenario on a fresh fleet and returns its row.
func runScenario(ctx context.Context, cfg config, bins binaries, sc *scenario, base string, verbose bool) *row {
	r := &row{name: sc.name, recoveryBound: cfg.recoveryBound}
	started := time.Now()
	defer func() { r.took = time.Since(started) }()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	dir := filepath.Join(base, sc.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.infra = err
		return r
	}
	fp := fleetParams{dir: dir, bins: bins, routers: 1, workers: 3, slots: cfg.slots,
		leaseTTL: cfg.leaseTTL, drainTimeout: cfg.drainTimeout}
	if sc.fleet != nil {
		sc.fleet(&fp)
	}
	f, err := startFleet(ctx, fp)
	if err != nil {
		r.infra = fmt.Errorf("start the fleet: %w", err)
		return r
	}
	defer f.stop()
	run := fmt.Sprintf("c%04x", rand.IntN(1<<16))
	d, err := newDriver(f, run, cfg.submitBound)
	if err != nil {
		r.infra = err
		return r
	}
	defer d.close()
	sr := &scenarioRun{sc: sc, cfg: cfg, f: f, d: d, r: r, verbose: verbose, lostEpoch: map[string]bool{}}
	took, ok := d.probe(ctx, kindFirst, time.Now(), 30*time.Second)
	if !ok {
		r.infra = errors.New("the fresh fleet served no attempt within 30s")
		return r
	}
	sr.logf("fleet up; first attempt ok after %s", took.Round(time.Millisecond))

	// Load: sessions play turns until stop.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < cfg.sessions; i++ {
		s := &session{key: fmt.Sprintf("agent:chaos:%s:%s:s%02d", sc.name, run, i), depth: 1 + rand.IntN(3),
			long: sc.longTurns, nudge: make(chan struct{}, 4)}
		sr.sessions = append(sr.sessions, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.runSession(ctx, s, stop)
		}()
	}
	loadStart := time.Now()
	if err := sleep(ctx, cfg.warmup); err == nil {
		if err := sc.inject(ctx, sr); err != nil {
			r.infra = fmt.Errorf("inject the fault: %w", err)
		}
	}
	sr.mu.Lock()
	until := loadStart.Add(cfg.load)
	if t := sr.lastEnd.Add(max(cfg.tail, sc.tail)); t.After(until) {
		until = t
	}
	sr.mu.Unlock()
	_ = sleep(ctx, time.Until(until))
	close(stop)
	wg.Wait()
	sr.probeWG.Wait()
	sr.logf("load stopped: %d attempts submitted; collecting results", d.n.Load())

	d.collect(ctx, time.Now().Add(cfg.resultBound))
	_ = sleep(ctx, cfg.settle)
	d.finalRead(ctx)
	fences := sessionFences(ctx, f.rdb, d.t)
	claimTimes(ctx, f.rdb, d.t)
	if err := writeAttempts(filepath.Join(dir, "attempts.jsonl"), d.t); err != nil {
		r.note("attempts.jsonl not written: %v", err)
	}
	for _, fn := range sr.beforeStop {
		fn(ctx)
	}
	f.stop() // every process gone: the ledger is complete

	entries, err := scripted.ReadLedger(f.ledger)
	if err != nil {
		r.infra = fmt.Errorf("read the ledger: %w", err)
		return r
	}
	check(r, checkInput{t: d.t, entries: entries, extraEnds: sr.extraEnds(entries), sessionFences: fences,
		lostRecordEpochs: sr.lostEpoch, allowed: allowedSet(sc.allowed), ledgerCheck: sc.ledgerCheck, oneEvent: sc.oneEvent,
		steadySenders: sc.steadySenders, noRefusals: sc.noRefusals})
	for _, fn := range sr.post {
		fn(entries)
	}
	r.recovered = len(sr.probes) > 0
	for _, p := range sr.probes {
		r.recovery = max(r.recovery, p.took)
		r.recovered = r.recovered && p.ok
	}
	if len(sr.probes) == 0 {
		r.problem("no fault ended, so no recovery was measured")
	}
	if ctx.Err() != nil && r.infra == nil {
		r.infra = fmt.Errorf("the scenario ran past its bound of %s", cfg.timeout)
	}
	return r
}

func allowedSet(codes []teamster.Code) map[teamster.Code]bool {
	m := map[teamster.Code]bool{}
	for _, c := range codes {
		m[c] = true
	}
	return m
}

// sessionFences reads each session record's fence straight from Redis:
// teamster:{s}:session field "fence", s = leases.Tag(sessionKey).
func sessionFences(ctx context.Context, rdb redis.UniversalClient, t *tracker) map[string]string {
	t.mu.Lock()
	var keys []string
	for s := range t.sessions {
		keys = append(keys, s)
	}
	t.mu.Unlock()
	out := map[string]string{}
	for _, s := range keys {
		out[s] = sessionFence(ctx, rdb, s)
	}
	return out
}

// claimTimes reads when each accepted attempt was accepted and claimed, by
// Redis's clock, from its record (teamster:{s}:attempt:<id> fields
// "accepted" and "claimed", Unix ms), for the notes and problem lines.
func claimTimes(ctx context.Context, rdb redis.UniversalClient, t *tracker) {
	as := t.accepted()
	cmds := make([]*redis.SliceCmd, len(as))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _ = rdb.Pipelined(pctx, func(p redis.Pipeliner) error {
		for i, a := range as {
			cmds[i] = p.HMGet(pctx, "teamster:{"+leases.Tag(a.session)+"}:attempt:"+a.id, "claimed", "accepted", "worker", "state")
		}
		return nil
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, a := range as {
		vals, err := cmds[i].Result()
		if err != nil || len(vals) != 4 {
			continue
		}
		a.redisClaim, a.redisAccept = unixMilli(vals[0]), unixMilli(vals[1])
		a.redisWorker, _ = vals[2].(string)
		a.redisState, _ = vals[3].(string)
	}
}

// unixMilli reads a Unix-ms field of a Redis hash; zero when absent.
func unixMilli(v any) time.Time {
	s, ok := v.(string)
	if !ok {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func sessionFence(ctx context.Context, rdb redis.UniversalClient, sessionKey string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := rdb.HGet(ctx, "teamster:{"+leases.Tag(sessionKey)+"}:session", "fence").Result()
	if err != nil {
		return ""
	}
	return v
}
