package main

import (
	"context"
	"fmt"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/leases"
)

// The scenarios on replicated topologies: a Redis Sentinel set, a Redis
// Cluster and a three-node NATS cluster, each started from the same
// binaries on loopback (internal/redisproc, internal/natsproc). Each runs
// one failover (the first primary is the only one behind the proxy that
// can freeze replication). A failover may fail the runs it caught
// (lease_lost, worker_lost) and answer attempts whose acceptance it lost
// (internal, "no record"), but no submit is refused, none is lost, run
// twice, overlapped or run out of order.
func haScenarios() []*scenario {
	codes := []teamster.Code{teamster.CodeLeaseLost, teamster.CodeWorkerLost, teamster.CodeInternal}
	return []*scenario{
		{
			name:        "sentinel-failover",
			what:        "Sentinel set: replication to the replica frozen, 300ms of acknowledged writes, then kill -9 of the primary; Sentinel promotes the replica",
			fleet:       func(p *fleetParams) { p.redisTopology = topologySentinel },
			allowed:     codes,
			oneEvent:    true,
			noRefusals:  true,
			longTurns:   true,
			ledgerCheck: checkStepsAndLedger,
			inject:      injectSentinelFailover,
		},
		{
			name:        "worker-pause-sentinel",
			what:        "Sentinel set: SIGSTOP of the busiest worker for 2x the lease TTL, then SIGCONT",
			fleet:       func(p *fleetParams) { p.redisTopology = topologySentinel },
			allowed:     []teamster.Code{teamster.CodeWorkerLost, teamster.CodeLeaseLost},
			oneEvent:    true,
			noRefusals:  true,
			ledgerCheck: checkStepsOnly,
			inject:      injectWorkerPause,
		},
		{
			name:        "cluster-failover",
			what:        "Redis Cluster: replication of the master serving the most sessions frozen, 300ms of acknowledged writes, then kill -9 of it; the cluster promotes its replica",
			fleet:       func(p *fleetParams) { p.redisTopology = topologyCluster },
			allowed:     codes,
			oneEvent:    true,
			noRefusals:  true,
			longTurns:   true,
			ledgerCheck: checkStepsAndLedger,
			inject:      injectClusterFailover,
		},
		{
			name:        "cluster-reshard",
			what:        "Redis Cluster: the slots of the load's sessions on one master migrated to another under load (MOVED and ASK)",
			fleet:       func(p *fleetParams) { p.redisTopology = topologyCluster },
			allowed:     nil,
			oneEvent:    true,
			noRefusals:  true,
			ledgerCheck: checkStepsAndLedger,
			inject:      injectClusterReshard,
		},
		{
			name:        "nats-node-kill",
			what:        "3-node NATS cluster, streams R3: kill -9 of the node leading TEAMSTER_ATTEMPTS, restarted on its store 2s later",
			fleet:       func(p *fleetParams) { p.natsNodes = 3 },
			noRefusals:  true,
			ledgerCheck: checkStepsAndLedger,
			inject:      injectNATSNodeKill,
		},
	}
}

// frozenWrites is how long the primary goes on acknowledging writes that
// never reach its replica before it is killed.
const frozenWrites = 300 * time.Millisecond

func injectSentinelFailover(ctx context.Context, sr *scenarioRun) error {
	if _, _, err := sr.busyWorker(ctx); err != nil {
		return err
	}
	inflight := sr.unfinished()
	s := sr.f.sentinel
	if err := s.FreezeReplication(); err != nil {
		return err
	}
	if err := sleep(ctx, frozenWrites); err != nil {
		return err
	}
	discarded := s.Proxy().Discarded()
	old, err := s.KillPrimary()
	if err != nil {
		return err
	}
	killed := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	primary, err := s.WaitFailover(wctx, old)
	if err != nil {
		return err
	}
	promoted := time.Now()
	sr.r.note("primary %s killed at %s with %d accepted attempts unfinished, %d bytes of replication stream never delivered; Sentinel promoted %s after %s",
		old, killed.Format("15:04:05.000"), inflight, discarded, primary, promoted.Sub(killed).Round(time.Millisecond))
	sr.logf("sentinel failover: %s -> %s in %s", old, primary, promoted.Sub(killed))
	sr.faultEnded(ctx, promoted)
	return nil
}

// busiestShard is the cluster shard whose master serves the most of the
// load's sessions.
func (sr *scenarioRun) busiestShard(ctx context.Context) (int, []int, error) {
	bySlot := map[int]bool{}
	for _, s := range sr.sessions {
		bySlot[leases.SlotOf(s.key)] = true
	}
	c := sr.f.cluster
	best, bestSlots := -1, []int(nil)
	for i := 0; i < 3; i++ {
		var slots []int
		for slot := range bySlot {
			addr, err := c.MasterOf(ctx, slot)
			if err != nil {
				return 0, nil, err
			}
			m, err := c.MasterAddr(ctx, i)
			if err != nil {
				return 0, nil, err
			}
			if addr == m {
				slots = append(slots, slot)
			}
		}
		if len(slots) > len(bestSlots) {
			best, bestSlots = i, slots
		}
	}
	if best < 0 {
		return 0, nil, fmt.Errorf("no master serves any of the load's %d sessions", len(sr.sessions))
	}
	return best, bestSlots, nil
}

func injectClusterFailover(ctx context.Context, sr *scenarioRun) error {
	if _, _, err := sr.busyWorker(ctx); err != nil {
		return err
	}
	shard, slots, err := sr.busiestShard(ctx)
	if err != nil {
		return err
	}
	inflight := sr.unfinished()
	c := sr.f.cluster
	if err := c.FreezeReplication(shard); err != nil {
		return err
	}
	if err := sleep(ctx, frozenWrites); err != nil {
		return err
	}
	discarded := c.Proxy(shard).Discarded()
	old, err := c.KillMaster(shard)
	if err != nil {
		return err
	}
	killed := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitFailover(wctx, shard); err != nil {
		return err
	}
	promoted := time.Now()
	sr.r.note("master %s (shard %d, %d of the load's sessions) killed at %s with %d accepted attempts unfinished, %d bytes of replication stream never delivered; its replica promoted after %s",
		old, shard, len(slots), killed.Format("15:04:05.000"), inflight, discarded, promoted.Sub(killed).Round(time.Millisecond))
	sr.faultEnded(ctx, promoted)
	return nil
}

func injectClusterReshard(ctx context.Context, sr *scenarioRun) error {
	if _, _, err := sr.busyWorker(ctx); err != nil {
		return err
	}
	from, slots, err := sr.busiestShard(ctx)
	if err != nil {
		return err
	}
	to := (from + 1) % 3
	start := time.Now()
	if err := sr.f.cluster.MigrateSlots(ctx, from, to, slots); err != nil {
		return err
	}
	end := time.Now()
	sr.r.note("%d slots (of %d sessions) migrated from shard %d to shard %d under load in %s",
		len(slots), len(sr.sessions), from, to, end.Sub(start).Round(time.Millisecond))
	sr.faultEnded(ctx, end)
	return nil
}

func injectNATSNodeKill(ctx context.Context, sr *scenarioRun) error {
	if _, _, err := sr.busyWorker(ctx); err != nil {
		return err
	}
	c := sr.f.natsCluster
	leader, err := c.StreamLeader(ctx, bus.StreamAttempts)
	if err != nil {
		return err
	}
	inflight := sr.unfinished()
	n := c.Node(leader)
	if err := n.Kill(); err != nil {
		return err
	}
	gone := time.Now()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	if err := n.Restart(); err != nil {
		return err
	}
	sr.r.note("kill -9 of %s (leader of %s) at %s with %d accepted attempts unfinished; restarted on its store at %s",
		n.Name(), bus.StreamAttempts, gone.Format("15:04:05.000"), inflight, time.Now().Format("15:04:05.000"))
	sr.faultEnded(ctx, gone)
	return nil
}

// unfinished counts the accepted attempts without a result yet.
func (sr *scenarioRun) unfinished() int {
	n := 0
	for _, a := range sr.d.t.accepted() {
		if !isDone(a) {
			n++
		}
	}
	return n
}
