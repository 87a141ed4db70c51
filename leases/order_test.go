package leases

import (
	"errors"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
)

// The order is FIFO: only the head of a session's order can be claimed, and
// the next attempt becomes claimable when the head finishes.
func TestOrderIsFIFO(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	ids := []string{"a1", "a2", "a3", "a4"}
	for _, id := range ids {
		accept(t, s, "sess", id, time.Minute)
	}
	if order, _ := s.order(ctx, "sess"); len(order) != 4 || order[0] != "a1" || order[3] != "a4" {
		t.Fatalf("order %v, want accept order", order)
	}
	for i, id := range ids {
		// Every later attempt is busy behind the current head.
		for _, later := range ids[i+1:] {
			if _, res, _ := k.Claim(ctx, "sess", later, "codex"); res.Status != ClaimBusy || res.Blocker != id {
				t.Fatalf("claim %s while %s is head: %+v, want busy behind %s", later, id, res, id)
			}
		}
		l := mustClaim(t, k, "sess", id)
		if _, res, _ := k.Claim(ctx, "sess", ids[len(ids)-1], "codex"); res.Status != ClaimBusy && i < len(ids)-1 {
			t.Fatalf("claim while %s runs: %+v, want busy", id, res)
		}
		if st, _ := l.Finish(ctx, Outcome{Code: OutcomeOK}); st != Finished {
			t.Fatalf("finish %s: %s", id, st)
		}
	}
	if order, _ := s.order(ctx, "sess"); len(order) != 0 {
		t.Fatalf("order after all finished %v, want empty", order)
	}
}

// A head whose queue deadline passed is dropped, with queue_timeout recorded,
// when the next attempt is claimed; an attempt claimed after its own deadline
// is refused as expired.
func TestExpiredHeadIsDropped(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", 30*time.Millisecond)
	accept(t, s, "sess", "a2", time.Minute)
	accept(t, s, "sess", "a3", 30*time.Millisecond)
	waitPast(t, s, "sess", "a3")

	l := mustClaim(t, k, "sess", "a2")
	a1, _ := s.Attempt(ctx, "sess", "a1")
	if a1.State != StateFinished || a1.Outcome != string(teamster.CodeQueueTimeout) {
		t.Fatalf("expired head a1: %+v, want finished with queue_timeout", a1)
	}
	if _, res, _ := k.Claim(ctx, "sess", "a3", "codex"); res.Status != ClaimExpired {
		t.Fatalf("claim past its own deadline: %+v, want expired", res)
	}
	a3, _ := s.Attempt(ctx, "sess", "a3")
	if a3.Outcome != string(teamster.CodeQueueTimeout) {
		t.Fatalf("a3 outcome %q, want queue_timeout", a3.Outcome)
	}
	if order, _ := s.order(ctx, "sess"); len(order) != 1 || order[0] != "a2" {
		t.Fatalf("order %v, want [a2]", order)
	}
	_ = l
}

// A claimed head whose lease expired (its worker died) is settled worker_lost
// by the next claim, so the session moves on.
func TestDeadHolderIsSettledWorkerLost(t *testing.T) {
	s := newStore(t)
	dead := newKeeper(t, s, "dead", 5*time.Second, nil)
	live := newKeeper(t, s, "live", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	accept(t, s, "sess", "a2", time.Minute)
	mustClaim(t, dead, "sess", "a1")
	if _, res, _ := live.Claim(ctx, "sess", "a2", "codex"); res.Status != ClaimBusy {
		t.Fatalf("claim while a1 holds: %+v", res)
	}
	s.rdb.Del(ctx, keysFor("sess").lease()) // the dead worker's lease expires
	mustClaim(t, live, "sess", "a2")
	a1, _ := s.Attempt(ctx, "sess", "a1")
	if a1.Outcome != string(teamster.CodeWorkerLost) {
		t.Fatalf("a1 outcome %q, want worker_lost", a1.Outcome)
	}
}

// A resubmitted attempt id is answered from its record and never appended twice.
func TestAcceptIsIdempotent(t *testing.T) {
	s := newStore(t)
	first := accept(t, s, "sess", "a1", time.Minute)
	if !first.New || first.State != StateAccepted {
		t.Fatalf("first accept %+v", first)
	}
	again := accept(t, s, "sess", "a1", time.Minute)
	if again.New || again.State != StateAccepted || string(again.Reply) != `{"v":1}` {
		t.Fatalf("second accept %+v, want the existing record", again)
	}
	if order, _ := s.order(ctx, "sess"); len(order) != 1 {
		t.Fatalf("order %v, want the attempt once", order)
	}
}

// Unaccept withdraws a queued attempt (its publish failed), but never one that
// was claimed.
func TestUnacceptOnlyWhileQueued(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	accept(t, s, "sess", "a2", time.Minute)
	mustClaim(t, k, "sess", "a1")
	if ok, err := s.Unaccept(ctx, "sess", "a1"); err != nil || ok {
		t.Fatalf("unaccept of a claimed attempt: %v %v, want refused", ok, err)
	}
	if ok, err := s.Unaccept(ctx, "sess", "a2"); err != nil || !ok {
		t.Fatalf("unaccept of a queued attempt: %v %v", ok, err)
	}
	if _, err := s.Attempt(ctx, "sess", "a2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("withdrawn attempt still recorded: %v", err)
	}
	if order, _ := s.order(ctx, "sess"); len(order) != 1 || order[0] != "a1" {
		t.Fatalf("order %v, want [a1]", order)
	}
}

// waitPast waits until Redis's clock is past an attempt's queue deadline.
func waitPast(t *testing.T, s *Store, session, attempt string) {
	t.Helper()
	a, err := s.Attempt(ctx, session, attempt)
	if err != nil {
		t.Fatal(err)
	}
	for {
		now, err := s.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !now.Before(a.Deadline) {
			return
		}
		time.Sleep(a.Deadline.Sub(now) + time.Millisecond)
	}
}
