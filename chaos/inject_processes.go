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

// Faults on the fleet's processes: kill -9 of a worker or router, SIGSTOP, a rolling drain.

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
