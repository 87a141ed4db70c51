package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness/scripted"
)

// scenarios are the suite's faults, in the order they run.
func scenarios() []*scenario {
	return append([]*scenario{
		{
			name:        "worker-kill",
			what:        "kill -9 of the busiest worker mid-run; restarted 3s later",
			allowed:     []teamster.Code{teamster.CodeWorkerLost},
			oneEvent:    true,
			ledgerCheck: checkStepsAndLedger,
			inject:      injectWorkerKill,
		},
		{
			name:        "router-kill",
			what:        "kill -9 of one of two routers during a burst of submits; restarted 2s later",
			fleet:       func(p *fleetParams) { p.routers = 2 },
			oneEvent:    true,
			ledgerCheck: checkStepsAndLedger,
			inject:      injectRouterKill,
		},
		{
			name:        "worker-pause",
			what:        "SIGSTOP of the busiest worker for 2x the lease TTL, then SIGCONT",
			allowed:     []teamster.Code{teamster.CodeWorkerLost, teamster.CodeLeaseLost},
			oneEvent:    true,
			ledgerCheck: checkStepsOnly,
			inject:      injectWorkerPause,
		},
		{
			name: "redis-restart",
			what: "redis-server killed and restarted empty (no persistence) under running turns; workers at the default lease TTL (10s)",
			// The default TTL: a run learns that Redis lost its lease at its
			// next renewal, up to ttl/3 later, as in production.
			fleet:     func(p *fleetParams) { p.leaseTTL = 10 * time.Second },
			longTurns: true,
			allowed: []teamster.Code{teamster.CodeLeaseLost, teamster.CodeWorkerLost,
				teamster.CodeInternal},
			ledgerCheck: checkStepsAndLedger,
			inject:      injectRedisRestart,
		},
		{
			name:        "nats-restart",
			what:        "nats-server killed (kill -9) and restarted on its JetStream file store",
			ledgerCheck: checkStepsAndLedger,
			// Load goes on past the registry TTL (10s) after the restart, so
			// that a router whose registry view went stale shows it.
			tail:   15 * time.Second,
			inject: injectNATSRestart,
		},
		{
			name:        "partition-redis",
			what:        "worker w3 cut off from Redis through a proxy for 4x the lease TTL (blackhole; 2nd round: severed), then healed",
			fleet:       func(p *fleetParams) { p.redisProxyFor = "w3" },
			allowed:     []teamster.Code{teamster.CodeWorkerLost, teamster.CodeLeaseLost},
			ledgerCheck: checkStepsAndLedger,
			inject:      injectRedisPartition,
		},
		{
			name:        "partition-nats",
			what:        "worker w3 cut off from NATS through a proxy for 2.5x the lease TTL (blackhole; 2nd round: severed), then healed",
			fleet:       func(p *fleetParams) { p.natsProxyFor = "w3" },
			ledgerCheck: checkStepsAndLedger,
			inject:      injectNATSPartition,
		},
		{
			name:          "rolling-drain",
			what:          "SIGTERM each worker in turn (drain, exit 0) and start it again, under load",
			oneEvent:      true,
			steadySenders: true,
			ledgerCheck:   checkStepsAndLedger,
			inject:        injectRollingDrain,
		},
	}, haScenarios()...)
}

// gap is the pause between two rounds of a fault.
const gap = 2 * time.Second

func injectWorkerKill(ctx context.Context, sr *scenarioRun) error {
	var victims []*attempt
	for round := 0; round < sr.cfg.rounds; round++ {
		w, runs, err := sr.busyWorker(ctx)
		if err != nil {
			return err
		}
		at, err := sr.killWorker(w)
		if err != nil {
			return err
		}
		victims = append(victims, runs...)
		sr.logf("killed %s with %d runs in flight", w.id, len(runs))
		sr.r.note("round %d: kill -9 %s with %d runs in flight; gone at %s", round+1, w.id, len(runs), at.Format("15:04:05.000"))
		sr.faultEnded(ctx, at)
		if err := sleep(ctx, 3*time.Second); err != nil {
			return err
		}
		if err := sr.f.restart(ctx, w); err != nil {
			return err
		}
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	sr.post = append(sr.post, func([]scripted.Entry) {
		sr.r.note("runs in flight on the killed workers ended: %s", resultCodes(sr, victims))
	})
	return nil
}

func injectRouterKill(ctx context.Context, sr *scenarioRun) error {
	sr.post = append(sr.post, func([]scripted.Entry) {
		// A resubmit after a lost reply is answered from the record when the
		// dead router had recorded the attempt first.
		resubmitted, recorded := 0, 0
		sr.d.t.mu.Lock()
		for _, a := range sr.d.t.all {
			if a.state != stateAccepted || len(a.retries) == 0 || a.retries[0].why != retryNoReply {
				continue
			}
			resubmitted++
			if !a.redisAccept.IsZero() && a.redisAccept.Before(a.retries[0].at) {
				recorded++
			}
		}
		sr.d.t.mu.Unlock()
		sr.r.note("%d attempts lost their submit reply and were resubmitted with the same attemptId; %d of them had been recorded before the resubmit (answered from the record, run once)",
			resubmitted, recorded)
	})
	for round := 0; round < sr.cfg.rounds; round++ {
		victim := sr.f.routers[round%len(sr.f.routers)]
		var wg sync.WaitGroup
		wg.Add(1)
		first := make(chan struct{})
		// Kill one router mid-burst, at a random point: once between an
		// eighth and a half of the submits were answered, the rest are in
		// flight at both routers, some of them half done.
		k := sr.cfg.burst/8 + rand.IntN(sr.cfg.burst*3/8)
		go func() {
			defer wg.Done()
			sr.d.burst(ctx, sr.cfg.burst, k, first)
		}()
		select {
		case <-first:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := victim.kill(); err != nil {
			return err
		}
		at := time.Now()
		sr.logf("killed router %s during a burst of %d submits", victim.id, sr.cfg.burst)
		sr.faultEnded(ctx, at)
		if err := sleep(ctx, gap); err != nil {
			return err
		}
		if err := sr.f.restart(ctx, victim); err != nil {
			return err
		}
		sr.r.note("round %d: kill -9 router %s during a burst of %d concurrent submits (after %d answers), gone at %s; restarted at %s",
			round+1, victim.id, sr.cfg.burst, k, at.Format("15:04:05.000"), time.Now().Format("15:04:05.000"))
		wg.Wait()
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	return nil
}

func injectWorkerPause(ctx context.Context, sr *scenarioRun) error {
	type paused struct {
		a     *attempt
		fence string
	}
	var all []paused
	samples := newFenceSampler()
	for round := 0; round < sr.cfg.rounds; round++ {
		w, runs, err := sr.busyWorker(ctx)
		if err != nil {
			return err
		}
		var sessions []string
		for _, a := range runs {
			sr.d.t.mu.Lock()
			all = append(all, paused{a, a.claimed.Fence})
			sr.d.t.mu.Unlock()
			sessions = append(sessions, a.session)
		}
		stopSampling := samples.start(ctx, sr, sessions)
		if err := w.signal(syscall.SIGSTOP); err != nil {
			stopSampling()
			return err
		}
		pause := 2 * sr.cfg.leaseTTL
		sr.logf("paused %s with %d runs in flight for %s", w.id, len(runs), pause)
		sr.r.note("round %d: SIGSTOP %s for %s with %d runs in flight", round+1, w.id, pause, len(runs))
		stopped := time.Now()
		serr := sleep(ctx, pause)
		if err := w.signal(syscall.SIGCONT); err != nil {
			stopSampling()
			return err
		}
		sr.r.note("round %d: SIGSTOP at %s, SIGCONT at %s", round+1, stopped.Format("15:04:05.000"), time.Now().Format("15:04:05.000"))
		sr.faultEnded(ctx, time.Now())
		if serr != nil {
			stopSampling()
			return serr
		}
		// Keep sampling the session fences while the woken worker's late
		// finishes arrive.
		go func() {
			_ = sleep(ctx, 3*sr.cfg.leaseTTL)
			stopSampling()
		}()
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	sr.post = append(sr.post, func([]scripted.Entry) {
		var as []*attempt
		for _, p := range all {
			as = append(as, p.a)
		}
		sr.r.note("runs in flight on the paused workers ended: %s", resultCodes(sr, as))
		bad := 0
		for _, p := range all {
			if res := p.a.durable; res != nil && res.Status == teamster.StatusOK && res.Fence == p.fence {
				continue // it committed before the pause: its fence was rightly the record's
			}
			if seen := samples.seen(p.a.session, p.fence); !seen.IsZero() {
				bad++
				sr.r.other++
				sr.r.problem("session %s: its record carried the paused run's fence %s at %s, though the run did not commit",
					p.a.session, p.fence, seen.Format("15:04:05.000"))
			}
		}
		sr.r.note("session record fences sampled every 20ms from the pause until 3x the TTL after SIGCONT: %d samples, %d showed a paused run's fence",
			samples.count(), bad)
	})
	return nil
}

func injectRedisRestart(ctx context.Context, sr *scenarioRun) error {
	type restart struct {
		killAt, upAt time.Time
		epochs       map[string]bool // fence epochs in use before the kill
		inflight     []*attempt
	}
	var restarts []restart
	for round := 0; round < sr.cfg.rounds; round++ {
		if _, _, err := sr.busyWorker(ctx); err != nil {
			return err
		}
		rs := restart{epochs: map[string]bool{}}
		nudge := map[string]bool{}
		sr.d.t.mu.Lock()
		for _, a := range sr.d.t.all {
			if a.claimed != nil {
				rs.epochs[epochOf(a.claimed.Fence)] = true
			}
			if a.state == stateAccepted && !isDone(a) {
				rs.inflight = append(rs.inflight, a)
				if a.claimed != nil {
					nudge[a.session] = true
				}
			}
		}
		sr.d.t.mu.Unlock()
		rs.killAt = time.Now()
		if err := sr.f.redis.Kill(); err != nil {
			return err
		}
		killed := time.Now()
		if err := sleep(ctx, 300*time.Millisecond); err != nil {
			return err
		}
		if err := sr.f.redis.Start(); err != nil {
			return err
		}
		rs.upAt = time.Now()
		sr.r.note("round %d: redis-server SIGKILLed at %s (gone at %s), up again empty at %s", round+1,
			rs.killAt.Format("15:04:05.000"), killed.Format("15:04:05.000"), rs.upAt.Format("15:04:05.000"))
		// The next turn of every session with a run in flight is submitted at
		// once: it must not start while that run still acts.
		for _, s := range sr.sessions {
			if nudge[s.key] {
				select {
				case s.nudge <- struct{}{}:
				default:
				}
			}
		}
		for e := range rs.epochs {
			sr.lostEpoch[e] = true
		}
		restarts = append(restarts, rs)
		sr.logf("redis killed with %d attempts in flight and restarted empty; nudged %d sessions", len(rs.inflight), len(nudge))
		sr.r.note("round %d: redis-server killed with %d accepted attempts unfinished (%d running); restarted empty after 300ms; the next turn of those %d sessions submitted at once",
			round+1, len(rs.inflight), len(nudge), len(nudge))
		sr.faultEnded(ctx, rs.upAt)
		// The fleet needs the quarantine (one lease TTL) before any session
		// starts anew: let this round's recovery probe finish before the
		// next kill, or the next fault lands inside the recovery it measures.
		sr.probeWG.Wait()
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	sr.beforeStop = append(sr.beforeStop, func(ctx context.Context) {
		// Every record in Redis was written after the last restart: none may
		// carry a fence of an earlier epoch.
		old := map[string]bool{}
		for _, rs := range restarts {
			for e := range rs.epochs {
				old[e] = true
			}
		}
		n, bad := 0, 0
		iter := sr.f.rdb.Scan(ctx, 0, "teamster:{*}:*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if !strings.HasSuffix(k, ":session") && !strings.Contains(k, ":attempt:") && !strings.HasSuffix(k, ":lease") {
				continue
			}
			fence, err := sr.f.rdb.HGet(ctx, k, "fence").Result()
			if err != nil || fence == "" {
				continue
			}
			n++
			if old[epochOf(fence)] {
				bad++
				sr.r.other++
				sr.r.problem("Redis key %s carries fence %s of an epoch from before the restart", k, fence)
			}
		}
		sr.r.note("fences in Redis after the restart: %d records checked, %d of an old epoch", n, bad)
	})
	sr.post = append(sr.post, func(entries []scripted.Entry) {
		for i, rs := range restarts {
			oldStarts, newStarts := 0, 0
			for _, e := range entries {
				if e.Event != scripted.EventStart || e.TimeNs < rs.upAt.UnixNano() {
					continue
				}
				if rs.epochs[epochOf(e.Fence)] {
					oldStarts++
					sr.r.other++
					sr.r.problem("attempt %s started at %s under fence %s, an epoch from before the restart",
						e.Attempt, time.Unix(0, e.TimeNs).Format("15:04:05.000"), e.Fence)
				} else {
					newStarts++
				}
			}
			// Results of turns claimed after the restart carry new epochs,
			// and turns of the sessions from before went on.
			okAfter := 0
			sr.d.t.mu.Lock()
			for _, a := range sr.d.t.all {
				res := a.durable
				if res == nil || a.acceptedAt.Before(rs.upAt) {
					continue
				}
				if res.Fence != "" && rs.epochs[epochOf(res.Fence)] {
					sr.r.other++
					sr.r.problem("attempt %s, accepted after the restart, has a result under fence %s of an old epoch", a.id, res.Fence)
				}
				if res.Status == teamster.StatusOK && (a.kind == kindLoad || a.kind == kindNudge) {
					okAfter++
				}
			}
			sr.d.t.mu.Unlock()
			if okAfter == 0 {
				sr.r.other++
				sr.r.problem("round %d: no turn of the load's sessions completed ok after the restart", i+1)
			}
			sr.r.note("round %d: after the restart %d runs started, all under new epochs unless listed; %d turns of the existing sessions completed ok",
				i+1, newStarts, okAfter)
			sr.r.note("round %d: the %d attempts unfinished at the kill ended: %s", i+1, len(rs.inflight), resultCodes(sr, rs.inflight))
		}
	})
	return nil
}

func injectNATSRestart(ctx context.Context, sr *scenarioRun) error {
	for round := 0; round < sr.cfg.rounds; round++ {
		if _, _, err := sr.busyWorker(ctx); err != nil {
			return err
		}
		unfinished := 0
		for _, a := range sr.d.t.accepted() {
			if !isDone(a) {
				unfinished++
			}
		}
		if err := sr.f.nats.kill(); err != nil {
			return err
		}
		gone := time.Now()
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
		if err := sr.f.nats.startAndWait(ctx); err != nil {
			return err
		}
		sr.logf("nats-server killed with %d attempts unfinished and restarted", unfinished)
		sr.r.note("round %d: kill -9 nats-server with %d accepted attempts unfinished, gone at %s; restarted on its store, serving JetStream at %s",
			round+1, unfinished, gone.Format("15:04:05.000"), time.Now().Format("15:04:05.000"))
		sr.faultEnded(ctx, time.Now())
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	sr.post = append(sr.post, eventsLostNote(sr))
	return nil
}

// The Redis cut outlasts go-redis's read timeout (5s), so that commands the
// worker sent into the partition are retried by its client while the first
// copies still wait to be delivered when it heals.
func injectRedisPartition(ctx context.Context, sr *scenarioRun) error {
	return injectPartition(ctx, sr, sr.f.redisProxy, "Redis", 4*sr.cfg.leaseTTL)
}

// The NATS cut stays under the registry TTL (10s): the worker stays listed.
func injectNATSPartition(ctx context.Context, sr *scenarioRun) error {
	if err := injectPartition(ctx, sr, sr.f.natsProxy, "NATS", 5*sr.cfg.leaseTTL/2); err != nil {
		return err
	}
	sr.post = append(sr.post, eventsLostNote(sr))
	return nil
}

func injectPartition(ctx context.Context, sr *scenarioRun, p *proxy, server string, cut time.Duration) error {
	var victims []*attempt
	for round := 0; round < sr.cfg.rounds; round++ {
		w, runs, err := sr.busyWorker(ctx, "w3")
		if err != nil {
			return err
		}
		victims = append(victims, runs...)
		// Odd rounds blackhole the connections (a silent partition); even
		// rounds sever them and refuse new ones (a partition the kernel
		// reports).
		how := "blackhole"
		if round%2 == 0 {
			p.stall()
		} else {
			how = "severed"
			p.sever()
		}
		sr.logf("cut %s from %s (%s) with %d runs in flight", w.id, server, how, len(runs))
		cutAt := time.Now()
		serr := sleep(ctx, cut)
		p.heal()
		sr.r.note("round %d: %s cut from %s (%s) at %s with %d runs in flight, healed at %s", round+1, w.id, server, how,
			cutAt.Format("15:04:05.000"), len(runs), time.Now().Format("15:04:05.000"))
		sr.faultEnded(ctx, time.Now())
		if serr != nil {
			return serr
		}
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	sr.post = append(sr.post, func([]scripted.Entry) {
		sr.r.note("runs in flight on the cut-off worker ended: %s", resultCodes(sr, victims))
	})
	return nil
}

func injectRollingDrain(ctx context.Context, sr *scenarioRun) error {
	for round := 0; round < sr.cfg.rounds; round++ {
		var codes []string
		for _, w := range sr.f.workers {
			running := len(sr.d.t.running()[w.id])
			t0 := time.Now()
			code, err := sr.f.drain(w)
			if err != nil {
				return err
			}
			codes = append(codes, fmt.Sprintf("%s exit %d after %s (%d runs in flight)", w.id, code, time.Since(t0).Round(time.Millisecond), running))
			if code != 0 {
				sr.r.other++
				sr.r.problem("worker %s exited %d after SIGTERM, want 0 (see %s)", w.id, code, w.logPath)
			}
			if err := sr.f.restart(ctx, w); err != nil {
				return err
			}
		}
		sr.logf("rolled every worker: %s", strings.Join(codes, "; "))
		sr.r.note("round %d: %s", round+1, strings.Join(codes, "; "))
		sr.faultEnded(ctx, time.Now())
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	return nil
}

// resultCodes summarises how attempts ended ("worker_lost×3, ok×1").
func resultCodes(sr *scenarioRun, as []*attempt) string {
	sr.d.t.mu.Lock()
	defer sr.d.t.mu.Unlock()
	m := map[string]int{}
	for _, a := range as {
		res := a.durable
		switch {
		case res == nil && len(a.results) > 0:
			res = decodeResult(a.results[0].data)
		case res == nil:
			m["none"]++
			continue
		}
		if res == nil {
			m["undecodable"]++
		} else if res.Error != nil {
			m[string(res.Error.Code)]++
		} else {
			m[string(res.Status)]++
		}
	}
	if len(m) == 0 {
		return "(none)"
	}
	return formatCounts(m)
}

// eventsLostNote notes how many attempts' result events never reached the
// client (their clients read the durable result instead).
func eventsLostNote(sr *scenarioRun) func([]scripted.Entry) {
	return func([]scripted.Entry) {
		n := 0
		for _, a := range sr.d.t.accepted() {
			sr.d.t.mu.Lock()
			if len(a.results) == 0 && a.durable != nil {
				n++
			}
			sr.d.t.mu.Unlock()
		}
		if n > 0 {
			sr.r.note("%d attempts' result events never arrived (core NATS during the outage); the client read their durable results", n)
		}
	}
}

// fenceSampler samples session record fences while a fault plays out.
type fenceSampler struct {
	mu    sync.Mutex
	n     int
	first map[string]map[string]time.Time // session -> fence -> first seen
}

func newFenceSampler() *fenceSampler {
	return &fenceSampler{first: map[string]map[string]time.Time{}}
}

// start samples the sessions' fences every 20ms until the returned stop.
func (s *fenceSampler) start(ctx context.Context, sr *scenarioRun, sessions []string) (stop func()) {
	sort.Strings(sessions)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, sk := range sessions {
				f := sessionFence(ctx, sr.f.rdb, sk)
				s.mu.Lock()
				s.n++
				if s.first[sk] == nil {
					s.first[sk] = map[string]time.Time{}
				}
				if _, ok := s.first[sk][f]; !ok && f != "" {
					s.first[sk][f] = time.Now()
				}
				s.mu.Unlock()
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// seen returns when fence was first seen as session's record fence; zero
// when never.
func (s *fenceSampler) seen(session, fence string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first[session][fence]
}

func (s *fenceSampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
