package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/teamster-fleet/teamster/leases"
)

// Renewal goals.
const (
	goalRenewTrips = 1
	goalRenewCPU   = 5.0 // % of one core
)

// measureRenewal holds n leases in one leases.Keeper (created by accept +
// claim through the leases API, against the real redis-server, no NATS) and
// measures what one renewal interval costs: round trips (go-redis hook) and
// CPU (this process, getrusage; and redis-server, INFO cpu) over `rounds`
// RenewNow calls. It runs before NATS and the fleet start, so this process is
// otherwise idle.
func measureRenewal(ctx context.Context, srv *servers, n, rounds int) ([]Row, error) {
	const ttl = 10 * time.Second
	cnt := &rtCounter{}
	rdb, err := newRedis(srv.redisURL(), cnt)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	store := leases.NewStore(rdb)
	if err := store.Load(ctx); err != nil {
		return nil, err
	}
	var lost atomic.Int64
	keeper := leases.NewKeeper(leases.KeeperParams{Store: store, Holder: "bench-renew", TTL: ttl, Logger: quietLogger(), NewEpochQuarantine: -1,
		OnLost: func(*leases.Lease, error) { lost.Add(1) }})
	defer keeper.Stop() // never started: RenewNow is driven by hand

	progress("renewal: creating %d leases (accept + claim through the leases API)", n)
	t0 := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := acceptAndClaim(ctx, store, keeper, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if got := keeper.Len(); got != n {
		return nil, fmt.Errorf("renewal: keeper holds %d leases, want %d", got, n)
	}
	progress("renewal: %d leases held after %s; measuring %d RenewNow rounds", n, time.Since(t0).Round(time.Millisecond), rounds)

	keeper.RenewNow(ctx) // warm: connections, buffers
	cnt.reset()
	keeper.RenewNow(ctx)
	trips, cmds, kinds := cnt.trips.Load(), cnt.cmds.Load(), cnt.breakdown(1)

	runtime.GC()
	redis0, rerr := redisCPU(ctx, rdb)
	cpu0 := processCPU()
	var lat latencies
	for i := 0; i < rounds; i++ {
		t := time.Now()
		keeper.RenewNow(ctx)
		lat = append(lat, time.Since(t))
	}
	cpu := (processCPU() - cpu0) / time.Duration(rounds)
	redis1, rerr2 := redisCPU(ctx, rdb)
	held := keeper.Len()

	interval := ttl / 3
	pct := 100 * float64(cpu) / float64(interval)
	rows := []Row{
		Row{Scenario: fmt.Sprintf("lease renewal: round trips per interval, %d leases", n), Value: ptr(float64(trips)), Unit: "round trips",
			Note: fmt.Sprintf("one RenewNow, counted by a go-redis hook: %d commands (%s)", cmds, kinds)}.
			withGoal(fmt.Sprintf("%d round trip", goalRenewTrips), trips == goalRenewTrips),
		Row{Scenario: fmt.Sprintf("lease renewal: RenewNow wall time, %d leases", n),
			Note: fmt.Sprintf("%d rounds; %d leases still held after them, %d lost", rounds, held, lost.Load())}.withLatency(lat),
		Row{Scenario: fmt.Sprintf("lease renewal: keeper CPU per interval, %d leases", n), Value: ptr(pct), Unit: "% of a core",
			Note: fmt.Sprintf("%s process CPU (user+sys, getrusage) per RenewNow, averaged over %d; interval ttl/3 = %s (ttl %s)",
				cpu.Round(time.Microsecond), rounds, interval.Round(time.Millisecond), ttl)}.
			withGoal(fmt.Sprintf("< %.0f%%", goalRenewCPU), pct < goalRenewCPU),
	}
	if rerr == nil && rerr2 == nil {
		rcpu := (redis1 - redis0) / time.Duration(rounds)
		rows = append(rows, Row{Scenario: fmt.Sprintf("lease renewal: redis-server CPU per interval, %d leases", n),
			Value: ptr(100 * float64(rcpu) / float64(interval)), Unit: "% of a core",
			Note: fmt.Sprintf("%s redis-server CPU (INFO cpu) per RenewNow; not part of the goal", rcpu.Round(time.Microsecond))})
	}

	// Clean up: empty Redis, then one more round, which Redis refuses for
	// every lease, so each ends now (its self-fence timer stopped) instead
	// of firing later in another scenario.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	keeper.RenewNow(ctx)
	return rows, nil
}

func acceptAndClaim(ctx context.Context, store *leases.Store, k *leases.Keeper, i int) error {
	session := fmt.Sprintf("bench:lease:%d", i)
	id := ulid.Make().String()
	if _, err := store.Accept(ctx, leases.AcceptArgs{SessionKey: session, AttemptID: id, HarnessID: "codex", ReplyTo: "_INBOX.bench.lease",
		QueueTimeout: 10 * time.Minute, RunBudget: 10 * time.Minute, Reply: []byte(`{"v":1}`)}); err != nil {
		return err
	}
	_, res, err := k.Claim(ctx, session, id, "codex")
	if err != nil {
		return err
	}
	if res.Status != leases.Claimed {
		return fmt.Errorf("claim %s: %s", session, res.Status)
	}
	return nil
}
