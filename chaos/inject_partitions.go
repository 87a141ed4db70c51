package main

import (
	"context"
	"time"

	"github.com/teamster-fleet/teamster/harness/scripted"
)

// Faults on the network: a worker cut off from Redis or NATS by its proxy.

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
