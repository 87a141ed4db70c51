package leases

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
)

// The reaper settles a queued attempt past its deadline as queue_timeout and a
// claimed attempt whose lease is gone as worker_lost, and drops index entries
// once their result events are confirmed sent.
func TestReaperSettlesAndPublishesOnce(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "s1", "q1", 20*time.Millisecond)
	accept(t, s, "s2", "c1", time.Minute)
	mustClaim(t, k, "s2", "c1")
	s.rdb.Del(ctx, keysFor("s2").lease())
	// Make c1 due now (its index entry points at the lease expiry).
	s.rdb.ZAdd(ctx, indexKeyOf(Tag("s2")), redisZ(0, indexMember(Tag("s2"), "c1")))
	waitPast(t, s, "s1", "q1")

	entries, _, err := s.Due(ctx, 100, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Reaped{}
	for _, e := range entries {
		r, err := s.Reap(ctx, e, time.Second, "reaper-test")
		if err != nil {
			t.Fatal(err)
		}
		got[e.AttemptID] = r
	}
	if r := got["q1"]; r.Action != ReapPublish || r.Outcome != string(teamster.CodeQueueTimeout) || r.HarnessID != "codex" || r.ReplyTo != "_INBOX.x" {
		t.Fatalf("q1 reaped %+v, want publish queue_timeout", r)
	}
	if r := got["c1"]; r.Action != ReapPublish || r.Outcome != string(teamster.CodeWorkerLost) || r.WorkerID != "w1" || r.SeqMax != SeqReservation {
		t.Fatalf("c1 reaped %+v, want publish worker_lost", r)
	}
	// Handed-out entries are hidden from other reapers.
	if again, _, _ := s.Due(ctx, 100, 30*time.Second); len(again) != 0 {
		t.Fatalf("entries handed out twice: %v", again)
	}
	for id, sess := range map[string]string{"q1": "s1", "c1": "s2"} {
		if _, err := s.MarkPublished(ctx, sess, id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// Marked but not yet confirmed sent: the entries stay, so that a reaper
	// sends the result events if their marker cannot.
	if n, _ := s.indexLen(ctx); n != 2 {
		t.Fatalf("index holds %d entries after marking, want 2", n)
	}
	for id, sess := range map[string]string{"q1": "s1", "c1": "s2"} {
		if ok, err := s.ConfirmSent(ctx, sess, id, "test"); err != nil || !ok {
			t.Fatalf("confirm %s: %v %v", id, ok, err)
		}
	}
	if n, _ := s.indexLen(ctx); n != 0 {
		t.Fatalf("index holds %d entries after confirming, want 0", n)
	}
}

// Several reapers racing over the same due entries settle each attempt once.
func TestConcurrentReapersSettleOnce(t *testing.T) {
	s := newStore(t)
	const n = 200
	for i := 0; i < n; i++ {
		accept(t, s, fmt.Sprintf("s%d", i), fmt.Sprintf("a%d", i), 10*time.Millisecond)
	}
	waitPast(t, s, "s0", "a0")
	time.Sleep(20 * time.Millisecond)
	var mu sync.Mutex
	published := map[string]int{}
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				entries, _, err := s.Due(ctx, 16, 30*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if len(entries) == 0 {
					return
				}
				for _, e := range entries {
					// Reap twice, as a reaper that crashed and one that
					// took over would.
					for i := 0; i < 2; i++ {
						res, err := s.Reap(ctx, e, time.Second, "reaper-test")
						if err != nil {
							t.Error(err)
							return
						}
						if res.Action == ReapPublish {
							mu.Lock()
							published[e.Tag]++
							mu.Unlock()
						}
					}
					if _, err := s.MarkPublishedTag(ctx, e.Tag, e.AttemptID, "test"); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(published) != n {
		t.Fatalf("%d attempts reaped, want %d", len(published), n)
	}
	for i := 0; i < n; i++ {
		a, _ := s.Attempt(ctx, fmt.Sprintf("s%d", i), fmt.Sprintf("a%d", i))
		if a.Outcome != string(teamster.CodeQueueTimeout) || !a.Published {
			t.Fatalf("attempt %d: %+v", i, a)
		}
	}
}

// A running attempt is not reaped; its entry waits for the lease's expiry.
func TestReaperWaitsForLiveLease(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "s", "a", time.Minute)
	mustClaim(t, k, "s", "a")
	r, err := s.Reap(ctx, DueEntry{Tag: Tag("s"), AttemptID: "a"}, time.Second, "reaper-test")
	if err != nil || r.Action != ReapWait {
		t.Fatalf("reap of a running attempt: %+v %v, want wait", r, err)
	}
	if until := time.Until(r.At); until <= 0 || until > 6*time.Second {
		t.Fatalf("wait until %s from now, want within the lease TTL", until)
	}
}

// A worker's outcome that was not marked published is republished after the
// grace period, not before.
func TestReaperRepublishesUnmarkedOutcome(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "s", "a", time.Minute)
	l := mustClaim(t, k, "s", "a")
	if st, _ := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{"r":1}`)}); st != Finished {
		t.Fatal(st)
	}
	e := DueEntry{Tag: Tag("s"), AttemptID: "a"}
	if r, _ := s.Reap(ctx, e, time.Hour, "reaper-test"); r.Action != ReapWait {
		t.Fatalf("reap within grace: %+v, want wait", r)
	}
	r, err := s.Reap(ctx, e, 0, "reaper-test")
	if err != nil || r.Action != ReapPublish || r.Outcome != OutcomeOK || string(r.Result) != `{"r":1}` {
		t.Fatalf("reap after grace: %+v %v, want the worker's result", r, err)
	}
}

// lostClaim claims attempt as a worker whose claim reply was lost: the claim
// ran in Redis and nothing else happened (no lease held, no reaper index
// move); then the lease runs out.
func lostClaim(t *testing.T, k *Keeper, session, attempt string) {
	t.Helper()
	if _, st, err := claimWithScript(claimScript)(ctx, k, session, attempt); err != nil || st != Claimed {
		t.Fatalf("claim %s: %v %s", attempt, err, st)
	}
	k.store.rdb.Del(ctx, keysFor(session).lease())
}

// reapsWorkerLost checks that attempt alone is due and that reaping it
// publishes worker_lost.
func reapsWorkerLost(t *testing.T, s *Store, attempt string) {
	t.Helper()
	due, _, err := s.Due(ctx, 10, time.Second)
	if err != nil || len(due) != 1 || due[0].AttemptID != attempt {
		t.Fatalf("due: %v %v, want %s alone", due, err, attempt)
	}
	r, err := s.Reap(ctx, due[0], time.Second, "reaper-test")
	if err != nil || r.Action != ReapPublish || r.Outcome != string(teamster.CodeWorkerLost) {
		t.Fatalf("reaped %+v %v, want publish worker_lost", r, err)
	}
}

// A claim whose reply was lost leaves the attempt claimed with its reaper
// index entry at the queue deadline (its worker never moved it). A later
// claim answers done and points the reapers at it, which find the attempt
// due at once and settle it worker_lost once the lease is gone.
func TestRedeliveredClaimPointsTheReapersAtTheAttempt(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "s", "a", time.Hour)
	lostClaim(t, k, "s", "a")
	if due, _, _ := s.Due(ctx, 10, time.Second); len(due) != 0 {
		t.Fatalf("due before the redelivery: %v (the entry should sit at the queue deadline)", due)
	}
	// A redelivery: the claim answers done and moves the index entry
	// (beside the caller; wait for it).
	if _, res, err := k.Claim(ctx, "s", "a", "codex"); err != nil || res.Status != ClaimDone {
		t.Fatalf("second claim: %v %+v, want done", err, res)
	}
	k.pointing.Wait()
	reapsWorkerLost(t, s, "a")
	// Another redelivery, of an attempt already published and sent (no
	// index entry): the claim creates none.
	if _, err := s.MarkPublished(ctx, "s", "a", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ConfirmSent(ctx, "s", "a", "test"); err != nil {
		t.Fatal(err)
	}
	if _, res, err := k.Claim(ctx, "s", "a", "codex"); err != nil || res.Status != ClaimDone {
		t.Fatalf("third claim: %v %+v, want done", err, res)
	}
	k.pointing.Wait()
	if n, _ := s.indexLen(ctx); n != 0 {
		t.Fatalf("index holds %d entries after a claim of a published attempt", n)
	}
}

// The walk of a later claim settles a head whose claim reply was lost
// (worker_lost); the claim points the reapers at it at once, instead of
// leaving its index entry at the queue deadline.
func TestClaimWalkPointsTheReapersAtWhatItSettled(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "s", "a1", time.Hour)
	accept(t, s, "s", "a2", time.Hour)
	lostClaim(t, k, "s", "a1")
	mustClaim(t, k, "s", "a2")  // walks: a1 is worker_lost; waits for the index update
	reapsWorkerLost(t, s, "a1") // a2's entry is at its lease expiry
}

// The first caller to mark an outcome published is the one that sends its
// result event: a worker and a reaper that both published it get different
// answers, a marker retrying with its own token is still the first, and a
// record that is gone says so without being re-created.
func TestMarkPublishedFirstMarkerWins(t *testing.T) {
	s := newStore(t)
	l := finishedOK(t, s, "s1", "a1", `{"ok":true}`)
	if a, _ := s.Attempt(ctx, "s1", "a1"); a.Published {
		t.Fatalf("finished record %+v reads published before any mark", a)
	}
	steps := []struct {
		name string
		mark func() (Marked, error)
		want Marked
	}{
		{"the worker", func() (Marked, error) { return s.MarkPublished(ctx, "s1", "a1", l.Fence()) }, MarkedNow},
		{"the worker again (a lost reply)", func() (Marked, error) { return s.MarkPublished(ctx, "s1", "a1", l.Fence()) }, MarkedNow},
		{"a reaper", func() (Marked, error) { return s.MarkPublishedTag(ctx, Tag("s1"), "a1", MarkerToken()) }, MarkedBefore},
		{"another reaper", func() (Marked, error) { return s.MarkPublishedTag(ctx, Tag("s1"), "a1", MarkerToken()) }, MarkedBefore},
		{"a missing record", func() (Marked, error) { return s.MarkPublished(ctx, "s1", "never-accepted", "x") }, MarkedGone},
	}
	for _, st := range steps {
		if m, err := st.mark(); err != nil || m != st.want {
			t.Fatalf("mark by %s: %v %v, want %v", st.name, m, err, st.want)
		}
	}
	if a, _ := s.Attempt(ctx, "s1", "a1"); !a.Published {
		t.Fatalf("marked record %+v does not read published", a)
	}
	if n, err := s.rdb.Exists(ctx, keysFor("s1").attempt("never-accepted")).Result(); err != nil || n != 0 {
		t.Fatalf("marking a missing record created it (exists=%d, %v)", n, err)
	}
	if _, err := s.MarkPublished(ctx, "s1", "a1", ""); err == nil {
		t.Fatal("an empty marker token was accepted")
	}
}

// A mark points the attempt's reaper index entry at the end of its send
// window, whatever it pointed at before: a marker that dies right after its
// claim, before the keeper moved the entry off the queue deadline, still
// has its unconfirmed mark taken over when the window ends.
func TestAMarkPointsTheReaperAtTheEndOfItsSendWindow(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "s1", "a1", time.Hour)
	l := mustClaim(t, k, "s1", "a1")
	if st, err := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{"v":1}`)}); err != nil || st != Finished {
		t.Fatalf("finish: %s %v", st, err)
	}
	// As if the keeper's index move had never been sent.
	member, key := indexMember(Tag("s1"), "a1"), indexKeyOf(Tag("s1"))
	queueDeadline := float64(time.Now().Add(time.Hour).UnixMilli())
	if err := s.rdb.ZAdd(ctx, key, redisZ(queueDeadline, member)).Err(); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if m, err := s.MarkPublished(ctx, "s1", "a1", "w1-fence"); err != nil || m != MarkedNow {
		t.Fatalf("mark: %v %v", m, err)
	}
	score, err := s.rdb.ZScore(ctx, key, member).Result()
	if err != nil {
		t.Fatal(err)
	}
	if at := time.UnixMilli(int64(score)); at.After(time.Now().Add(SendWindow)) || at.Before(before.Add(SendWindow-time.Second)) {
		t.Fatalf("index entry due at %s after the mark, want the send window's end (%s from the mark)", at.Format(time.RFC3339Nano), SendWindow)
	}
}
