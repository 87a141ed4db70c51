package leases

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/internal/testenv"
)

var ctx = context.Background()

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	return l
}

func newKeeper(t *testing.T, s *Store, holder string, ttl time.Duration, clock clockwork.Clock) *Keeper {
	t.Helper()
	k := NewKeeper(KeeperParams{Store: s, Holder: holder, TTL: ttl, Clock: clock, Logger: quietLogger(), NewEpochQuarantine: -1})
	t.Cleanup(k.Stop)
	return k
}

func accept(t *testing.T, s *Store, session, attempt string, queueTimeout time.Duration) Accepted {
	t.Helper()
	a, err := s.Accept(ctx, AcceptArgs{
		SessionKey: session, AttemptID: attempt, HarnessID: "codex", ReplyTo: "_INBOX.x",
		QueueTimeout: queueTimeout, RunBudget: time.Minute, Reply: []byte(`{"v":1}`),
	})
	if err != nil {
		t.Fatalf("accept %s: %v", attempt, err)
	}
	return a
}

func mustClaim(t *testing.T, k *Keeper, session, attempt string) *Lease {
	t.Helper()
	l, res, err := k.Claim(ctx, session, attempt, "codex")
	if err != nil {
		t.Fatalf("claim %s: %v", attempt, err)
	}
	if res.Status != Claimed {
		t.Fatalf("claim %s: status %s (blocker %q), want claimed", attempt, res.Status, res.Blocker)
	}
	// The reaper index update goes beside the run; tests that look at the
	// index see it landed.
	k.pointing.Wait()
	return l
}

// parseFence splits <epoch>:<n>.
func parseFence(t *testing.T, f string) (string, int64) {
	t.Helper()
	epoch, n, ok := strings.Cut(f, ":")
	if !ok {
		t.Fatalf("fence %q is not <epoch>:<n>", f)
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		t.Fatalf("fence %q: %v", f, err)
	}
	return epoch, v
}

func attemptID(i int) string { return fmt.Sprintf("a%04d", i) }

func newPrivateRedis(t *testing.T) *testenv.Redis { return testenv.NewRedis(t) }

// waitRedis waits until a restarted server answers.
func waitRedis(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis did not come back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finishedOK accepts, claims (under holder w1) and finishes attempt as ok
// with result, and returns its lease.
func finishedOK(t *testing.T, s *Store, session, attempt, result string) *Lease {
	t.Helper()
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, session, attempt, time.Minute)
	l := mustClaim(t, k, session, attempt)
	if st, err := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(result)}); err != nil || st != Finished {
		t.Fatalf("finish %s: %s %v", attempt, st, err)
	}
	return l
}

// indexLen is the number of attempts in the reaper index (all shards).
func (s *Store) indexLen(ctx context.Context) (int64, error) {
	cmds := make([]*redis.IntCmd, IndexShards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range indexKeys {
			cmds[i] = p.ZCard(ctx, key)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// order returns the attempt ids in sessionKey's order, head first.
func (s *Store) order(ctx context.Context, sessionKey string) ([]string, error) {
	return s.rdb.LRange(ctx, keysFor(sessionKey).order(), 0, -1).Result()
}

// ping checks that Redis answers.
func (s *Store) ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }
