package main

import (
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
