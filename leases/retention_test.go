package leases

import (
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
)

func TestCheckRetention(t *testing.T) {
	for _, tc := range []struct {
		d  time.Duration
		ok bool
	}{
		{0, true}, // the default
		{MinRetention, true},
		{2 * time.Hour, true},
		{FinishedTTL, true},
		{MinRetention - time.Second, false},
		{FinishedTTL + time.Second, false},
		{-time.Hour, false},
	} {
		if err := CheckRetention(tc.d); (err == nil) != tc.ok {
			t.Errorf("CheckRetention(%s) = %v, want ok %v", tc.d, err, tc.ok)
		}
	}
}

// A store's retention is the TTL of every record it finishes: by the worker
// (finish, abandon) and by the fleet (the reaper, a claim's walk), and the
// accept TTL counts it after the queue and run budgets.
func TestRetentionSetsTheRecordsTTL(t *testing.T) {
	const keep = 15 * time.Minute
	s := newStore(t, WithRetention(keep))
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	ttl := func(key string) time.Duration {
		t.Helper()
		d, err := s.rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	within := func(what string, got, want time.Duration) {
		t.Helper()
		if got > want || got < want-time.Minute {
			t.Errorf("%s: TTL %s, want about %s", what, got, want)
		}
	}

	// accept: queue timeout (1m) + run budget (1m, the helper's) + retention
	accept(t, s, "s1", "a1", time.Minute)
	within("accepted record", ttl(keysFor("s1").attempt("a1")), 2*time.Minute+keep)
	within("attempt id", ttl(attemptIDKey("a1")), 2*time.Minute+keep)

	l := mustClaim(t, k, "s1", "a1")
	if st, err := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{"ok":true}`)}); err != nil || st != Finished {
		t.Fatalf("finish: %s %v", st, err)
	}
	within("finished record", ttl(keysFor("s1").attempt("a1")), keep)

	accept(t, s, "s2", "b1", time.Minute)
	lb := mustClaim(t, k, "s2", "b1")
	if st, err := lb.Abandon(ctx, string(teamster.CodeLeaseLost), []byte("r")); err != nil || st != Finished {
		t.Fatalf("abandon: %s %v", st, err)
	}
	within("abandoned record", ttl(keysFor("s2").attempt("b1")), keep)

	// The reaper's queue_timeout.
	accept(t, s, "s3", "q1", 20*time.Millisecond)
	waitPast(t, s, "s3", "q1")
	if r, err := s.Reap(ctx, DueEntry{Tag: Tag("s3"), AttemptID: "q1"}, time.Second, "reaper-test"); err != nil || r.Outcome != string(teamster.CodeQueueTimeout) {
		t.Fatalf("reap q1: %+v %v", r, err)
	}
	within("record settled by the reaper", ttl(keysFor("s3").attempt("q1")), keep)

	// A claim's walk settles an expired head on its way.
	accept(t, s, "s4", "h1", 20*time.Millisecond)
	accept(t, s, "s4", "h2", time.Minute)
	waitPast(t, s, "s4", "h1")
	mustClaim(t, k, "s4", "h2")
	within("record settled by a claim's walk", ttl(keysFor("s4").attempt("h1")), keep)
}

// Once published, a record keeps what answers a resubmit but not the result:
// the results stream holds it, and the record's size no longer grows with
// it.
func TestMarkPublishedDropsTheStoredResult(t *testing.T) {
	s := newStore(t)
	finishedOK(t, s, "s1", "a1", `{"ok":true}`)
	if a, _ := s.Attempt(ctx, "s1", "a1"); string(a.Result) != `{"ok":true}` || a.Published {
		t.Fatalf("finished record %+v, want the result, unpublished", a)
	}
	if _, err := s.MarkPublished(ctx, "s1", "a1", "test"); err != nil {
		t.Fatal(err)
	}
	a, err := s.Attempt(ctx, "s1", "a1")
	if err != nil {
		t.Fatal(err)
	}
	if !a.Published || len(a.Result) > 0 || a.State != StateFinished || a.Outcome != OutcomeOK {
		t.Fatalf("published record %+v, want published, finished ok, no result", a)
	}
	again := accept(t, s, "s1", "a1", time.Minute)
	if again.New || again.State != StateFinished || string(again.Reply) != `{"v":1}` {
		t.Fatalf("resubmit after publish %+v, want the stored reply of the finished attempt", again)
	}
}
