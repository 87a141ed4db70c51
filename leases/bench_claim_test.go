package leases

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/teamster-fleet/teamster"
)

// Benchmarks of the Redis path of one attempt against the package's real
// redis-server (TestMain): the claim alone, a whole attempt (accept, claim,
// finish, mark published) as consecutive turns of one session, and a renewal
// round with many leases held. Each reports p50/p99 of one operation and the
// Redis round trips it took (pipelines count once), next to ns/op.

// benchStore flushes the shared redis-server and returns a store whose client
// counts round trips.
func benchStore(b *testing.B) (*Store, *benchTrips) {
	b.Helper()
	env.FlushRedis(b)
	c := redis.NewClient(&redis.Options{Addr: env.Redis.Addr()})
	trips := &benchTrips{}
	c.AddHook(trips)
	b.Cleanup(func() { c.Close() })
	s := NewStore(c)
	if err := s.Load(context.Background()); err != nil {
		b.Fatalf("load scripts: %v", err)
	}
	return s, trips
}

func benchKeeper(b *testing.B, s *Store) *Keeper {
	b.Helper()
	k := NewKeeper(KeeperParams{Store: s, Holder: "bench", TTL: 10 * time.Second, Logger: quietLogger(), NewEpochQuarantine: -1})
	b.Cleanup(k.Stop)
	return k
}

func benchAccept(b *testing.B, s *Store, session, attempt string) {
	b.Helper()
	if _, err := s.Accept(context.Background(), AcceptArgs{SessionKey: session, AttemptID: attempt, HarnessID: "codex",
		ReplyTo: "_INBOX.bench", QueueTimeout: 10 * time.Minute, RunBudget: 10 * time.Minute, Reply: []byte(`{"v":1}`)}); err != nil {
		b.Fatalf("accept %s: %v", attempt, err)
	}
}

func benchClaim(b *testing.B, k *Keeper, session, attempt string) *Lease {
	b.Helper()
	l, res, err := k.Claim(context.Background(), session, attempt, "codex")
	if err != nil || res.Status != Claimed {
		b.Fatalf("claim %s: %v %s", attempt, err, res.Status)
	}
	return l
}

// reportLatency adds p50 and p99 (µs) of d, and round trips per op.
func reportLatency(b *testing.B, d []time.Duration, trips int64) {
	b.Helper()
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(p float64) float64 {
		i := int(p*float64(len(d))+0.5) - 1
		return float64(d[max(0, min(i, len(d)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(float64(trips)/float64(len(d)), "round-trips/op")
}

// BenchmarkClaim is one claim (the claim script; the reaper index update it
// sends beside the run is counted in round-trips/op when it lands in time) of a
// queued attempt at the head of its session's order.
func BenchmarkClaim(b *testing.B) {
	s, trips := benchStore(b)
	k := benchKeeper(b, s)
	for i := 0; i < b.N; i++ {
		benchAccept(b, s, fmt.Sprintf("bench:claim:%d", i), fmt.Sprintf("a%d", i))
	}
	d := make([]time.Duration, 0, b.N)
	trips.reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		benchClaim(b, k, fmt.Sprintf("bench:claim:%d", i), fmt.Sprintf("a%d", i))
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, d, trips.trips.Load())
}

// BenchmarkAttemptPath is the Redis work of one attempt, as consecutive turns
// of one session: accept (index + script), claim (script + index), the fenced
// finish, and mark published (one pipeline). The flow also reads the session
// record once (HGETALL), which is not included.
func BenchmarkAttemptPath(b *testing.B) {
	s, trips := benchStore(b)
	k := benchKeeper(b, s)
	ctx := context.Background()
	result := []byte(`{"v":1,"attemptId":"a","status":"ok","assistantTexts":["hello"],"usage":{"outputTokens":0}}`)
	update := OwnerUpdate(teamster.SessionRecord{SessionKey: "bench:path", SessionID: "sid", StorePath: "/var/openclaw/bench",
		AgentID: "main", AgentHarnessID: "codex", OwnerPluginID: "codex", NativeBinding: `{"thread":"t","turns":1}`})
	d := make([]time.Duration, 0, b.N)
	trips.reset()
	resetCommandStats(b, s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("a%d", i)
		t0 := time.Now()
		benchAccept(b, s, "bench:path", id)
		l := benchClaim(b, k, "bench:path", id)
		st, err := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: result, Session: update})
		if err != nil || st != Finished {
			b.Fatalf("finish %s: %v %s", id, err, st)
		}
		if _, err := s.MarkPublished(ctx, "bench:path", id, "test"); err != nil {
			b.Fatalf("mark published %s: %v", id, err)
		}
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, d, trips.trips.Load())
	b.ReportMetric(scriptMicros(b, s)/float64(b.N), "script-µs/op")
}

// resetCommandStats zeroes redis-server's per-command statistics.
func resetCommandStats(b *testing.B, s *Store) {
	b.Helper()
	if err := s.rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatalf("config resetstat: %v", err)
	}
}

// scriptMicros is the time redis-server spent running scripts (EVALSHA and
// EVAL, the commands they call included) since resetCommandStats, by its own
// INFO commandstats: the scripts' cost without the network's.
func scriptMicros(b *testing.B, s *Store) float64 {
	b.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("info commandstats: %v", err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("info commandstats %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}

// BenchmarkRenewNow is one renewal round with n leases held: one pipeline of
// n renew scripts and one ZADD XX.
func BenchmarkRenewNow(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			s, trips := benchStore(b)
			k := benchKeeper(b, s)
			var wg sync.WaitGroup
			work := make(chan int)
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						session, id := fmt.Sprintf("bench:renew:%d", i), fmt.Sprintf("a%d", i)
						benchAccept(b, s, session, id)
						benchClaim(b, k, session, id)
					}
				}()
			}
			for i := 0; i < n; i++ {
				work <- i
			}
			close(work)
			wg.Wait()
			ctx := context.Background()
			k.RenewNow(ctx) // warm
			d := make([]time.Duration, 0, b.N)
			trips.reset()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				k.RenewNow(ctx)
				d = append(d, time.Since(t0))
			}
			b.StopTimer()
			if held := k.Len(); held != n {
				b.Fatalf("%d leases held after the rounds, want %d", held, n)
			}
			reportLatency(b, d, trips.trips.Load())
		})
	}
}

// benchTrips counts Redis round trips: a command or a pipeline is one. The
// commands go-redis sends to set up a pooled connection are not counted.
type benchTrips struct{ trips atomic.Int64 }

func (t *benchTrips) reset() { t.trips.Store(0) }

func (t *benchTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *benchTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !benchConnSetup(cmd) {
			t.trips.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (t *benchTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !benchConnSetup(cmds[0]) {
			t.trips.Add(1)
		}
		return next(ctx, cmds)
	}
}

func benchConnSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
