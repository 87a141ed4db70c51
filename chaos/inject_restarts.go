package main

import (
	"context"
	"strings"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness/scripted"
)

// Faults on the servers: kill -9 of redis-server and nats-server, then a restart.

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
