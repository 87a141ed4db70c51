package leases

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
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
	for s.Ping(ctx) != nil {
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
