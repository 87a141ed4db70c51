package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/leases"
)

// measureClaims measures what one claim costs redis-server: n claims in a
// row from one goroutine (as leases' BenchmarkClaim), through the leases
// API against the bench's redis-server, no NATS, in two kinds:
//
//   - a session's first claim, which starts a fence epoch: since the
//     failover safety of 29e7c50 the claim script reads the node's
//     replication id (INFO replication), finds no epoch, reads (and here
//     sets) the slot's node marker and writes the session's fence hash;
//   - a later turn's claim, on a session whose fence epoch began on this
//     node (accept, claim, finish, then the measured claim of a second
//     attempt): the script still reads the replication id, to compare it
//     with the epoch's node, and goes on in the same epoch.
//
// For each it gives redis-server's CPU per claim (INFO cpu, which includes
// reading and answering the command: one round trip each here, where the
// fleet's pipelines carry many), the scripts' own time (INFO commandstats,
// EVALSHA with the commands the scripts call), and what INFO takes of it.
// Only the claims run in the window, besides the keeper's reaper-index move
// after each (its own small pipeline).
func measureClaims(ctx context.Context, redisURL string, n int) ([]Row, error) {
	cnt := &rtCounter{}
	rdb, err := newRedis(redisURL, cnt)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	store := leases.NewStore(rdb)
	if err := store.Load(ctx); err != nil {
		return nil, err
	}
	keeper := leases.NewKeeper(leases.KeeperParams{Store: store, Holder: "bench-claim", TTL: 10 * time.Second, Logger: quietLogger(), NewEpochQuarantine: -1})
	defer keeper.Stop() // never started
	accept := func(session, id string) error {
		_, err := store.Accept(ctx, leases.AcceptArgs{SessionKey: session, AttemptID: id, HarnessID: "codex", ReplyTo: "_INBOX.bench.claim",
			QueueTimeout: 10 * time.Minute, RunBudget: 10 * time.Minute, Reply: []byte(`{"v":1}`)})
		return err
	}
	claim := func(session, id string) (*leases.Lease, error) {
		l, res, err := keeper.Claim(ctx, session, id, "codex")
		if err != nil {
			return nil, err
		}
		if res.Status != leases.Claimed {
			return nil, fmt.Errorf("claim %s of %s: %s", id, session, res.Status)
		}
		return l, nil
	}

	progress("claims: %d first claims of a session, %d claims of a later turn", n, n)
	// First claims: n sessions with one queued attempt each.
	for i := 0; i < n; i++ {
		if err := accept(fmt.Sprintf("bench:claim:first:%d", i), fmt.Sprintf("first-%d", i)); err != nil {
			return nil, err
		}
	}
	first, err := claimWindow(ctx, rdb, cnt, n, func(i int) error {
		_, err := claim(fmt.Sprintf("bench:claim:first:%d", i), fmt.Sprintf("first-%d", i))
		return err
	})
	if err != nil {
		return nil, err
	}
	// Later turns: n sessions that ran a first turn (accept, claim, finish)
	// and have a second attempt queued.
	result := []byte(`{"v":1,"attemptId":"turn1","status":"ok","assistantTexts":["hello"],"usage":{"outputTokens":0}}`)
	for i := 0; i < n; i++ {
		session, t1, t2 := fmt.Sprintf("bench:claim:turn:%d", i), fmt.Sprintf("turn1-%d", i), fmt.Sprintf("turn2-%d", i)
		if err := accept(session, t1); err != nil {
			return nil, err
		}
		l, err := claim(session, t1)
		if err != nil {
			return nil, err
		}
		if st, err := l.Finish(ctx, leases.Outcome{Code: leases.OutcomeOK, Result: result}); err != nil || st != leases.Finished {
			return nil, fmt.Errorf("finish %s: %v %s", t1, err, st)
		}
		if err := accept(session, t2); err != nil {
			return nil, err
		}
	}
	later, err := claimWindow(ctx, rdb, cnt, n, func(i int) error {
		_, err := claim(fmt.Sprintf("bench:claim:turn:%d", i), fmt.Sprintf("turn2-%d", i))
		return err
	})
	if err != nil {
		return nil, err
	}

	// Clean up as the renewal scenario does: empty Redis, then one renewal
	// round, refused for every lease, so each ends now.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	keeper.RenewNow(ctx)
	return []Row{
		first.row(fmt.Sprintf("leases: claim, a session's first (new fence epoch), %d in a row", n),
			"the claim script reads the node's replication id (INFO replication), finds no epoch, reads and sets the slot's node marker and starts the epoch"),
		later.row(fmt.Sprintf("leases: claim, a later turn (same fence epoch), %d in a row", n),
			"the claim script reads the node's replication id (INFO replication), finds the epoch began on this node and goes on in it"),
	}, nil
}

// claimRun is one window of claims.
type claimRun struct {
	n                 int
	lat               latencies
	redisCPU, procCPU time.Duration
	scriptUs          float64 // INFO commandstats: EVALSHA and EVAL, the commands the scripts call included
	scriptCalls       float64
	infoCalls, infoUs float64 // INFO, called by the scripts (commands a script calls count under their own names too)
	trips, cmds       int64
	kinds             string
}

// claimWindow resets redis-server's command statistics, runs claim(i) for
// i < n and reads what they cost.
func claimWindow(ctx context.Context, rdb *redis.Client, cnt *rtCounter, n int, claim func(int) error) (*claimRun, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	r := &claimRun{n: n}
	cnt.reset()
	redis0, err := redisCPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	cpu0 := processCPU()
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := claim(i); err != nil {
			return nil, err
		}
		r.lat = append(r.lat, time.Since(t))
	}
	time.Sleep(50 * time.Millisecond) // the last reaper-index moves
	r.procCPU = processCPU() - cpu0
	r.trips, r.cmds, r.kinds = cnt.trips.Load(), cnt.cmds.Load(), cnt.breakdown(float64(n))
	redis1, err := redisCPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	r.redisCPU = redis1 - redis0
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var calls, us float64
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				calls, _ = strconv.ParseFloat(v, 64)
			}
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				us, _ = strconv.ParseFloat(v, 64)
			}
		}
		switch name {
		case "cmdstat_info":
			// Besides the scripts' INFO replication, the window's two INFO
			// cpu (a few µs each).
			r.infoCalls, r.infoUs = max(calls-2, 0), us
		case "cmdstat_evalsha", "cmdstat_eval":
			r.scriptUs += us
			r.scriptCalls += calls
		}
	}
	return r, nil
}

func (r *claimRun) row(scenario, what string) Row {
	n := float64(r.n)
	note := fmt.Sprintf("%s; redis-server CPU per claim (INFO cpu, the round trip's reading and answering included); the scripts' own time %.1f µs per claim (INFO commandstats: EVALSHA, with the commands they call; %.2f scripts per claim), of which INFO %.1f µs in %.2f calls per claim; %.2f round trips per claim (%s); this process %s CPU per claim; one goroutine, as leases' BenchmarkClaim",
		what, r.scriptUs/n, r.scriptCalls/n, r.infoUs/n, r.infoCalls/n, float64(r.trips)/n, r.kinds,
		(r.procCPU / time.Duration(r.n)).Round(100*time.Nanosecond))
	return Row{Scenario: scenario, Value: ptr(us(r.redisCPU / time.Duration(r.n))), Unit: "µs redis-server CPU per claim", Note: note}.withLatency(r.lat)
}
