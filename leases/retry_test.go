package leases

import (
	"testing"
	"time"
)

// A claim retried with the same token (a client retrying after a lost reply)
// gets the same claim back, not "done"; another claim still gets "done".
func TestClaimRetryWithTheSameTokenGetsTheClaim(t *testing.T) {
	s := newStore(t)
	accept(t, s, "sess", "a1", time.Minute)
	k := keysFor("sess")
	keys := []string{k.order(), k.attempt("a1"), k.lease(), k.fence(), k.session(), k.node()}
	args := func(token string) []any {
		return []any{"a1", "w1", 5000, newEpoch(), SeqReservation, k.prefix(), FinishedTTL.Milliseconds(), token, 0, "codex"}
	}
	first, err := claimScript.Run(ctx, s.rdb, keys, args("tok-1")...).StringSlice()
	if err != nil || first[0] != "claimed" {
		t.Fatalf("first claim %q %v", first, err)
	}
	again, err := claimScript.Run(ctx, s.rdb, keys, args("tok-1")...).StringSlice()
	if err != nil || again[0] != "claimed" || again[1] != first[1] {
		t.Fatalf("retried claim %q %v, want the same claim %q", again, err, first[1])
	}
	other, err := claimScript.Run(ctx, s.rdb, keys, args("tok-2")...).StringSlice()
	if err != nil || other[0] != "done" {
		t.Fatalf("another claim %q %v, want done", other, err)
	}
}

// A finish retried after its reply was lost is answered ok; a different
// outcome is still refused.
func TestFinishRetryIsIdempotent(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	keys := keysFor("sess")
	fin := func(outcome, result string) string {
		st, err := finishScript.Run(ctx, s.rdb, []string{keys.order(), keys.attempt("a1"), keys.lease(), keys.session()},
			"a1", l.Fence(), outcome, result, 1000, "w1").Text()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := fin(OutcomeOK, "r1"); st != "ok" {
		t.Fatalf("finish %q", st)
	}
	if st := fin(OutcomeOK, "r1"); st != "ok" {
		t.Fatalf("the same finish again %q, want ok", st)
	}
	if st := fin("harness_failed", "r2"); st != "finished" {
		t.Fatalf("another outcome %q, want finished", st)
	}
}

// Unclaim gives back a claim nothing acted on: the attempt is accepted again
// at the head of its order and can be claimed by another worker.
func TestUnclaimGivesTheAttemptBack(t *testing.T) {
	s := newStore(t)
	k1 := newKeeper(t, s, "w1", 5*time.Second, nil)
	k2 := newKeeper(t, s, "w2", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	accept(t, s, "sess", "a2", time.Minute)
	l := mustClaim(t, k1, "sess", "a1")
	ok, err := l.Unclaim(ctx)
	if err != nil || !ok {
		t.Fatalf("unclaim %v %v", ok, err)
	}
	if a, _ := s.Attempt(ctx, "sess", "a1"); a.State != StateAccepted || a.WorkerID != "" {
		t.Fatalf("after unclaim %+v", a)
	}
	if _, res, _ := k2.Claim(ctx, "sess", "a2", "codex"); res.Status != ClaimBusy {
		t.Fatalf("a2 jumped the queue: %+v", res)
	}
	l2 := mustClaim(t, k2, "sess", "a1")
	if _, n1 := parseFence(t, l.Fence()); func() bool { _, n2 := parseFence(t, l2.Fence()); return n2 <= n1 }() {
		t.Fatalf("the second claim's fence %s does not follow %s", l2.Fence(), l.Fence())
	}
	// An unclaim after the fleet settled the attempt changes nothing.
	s.rdb.Del(ctx, keysFor("sess").lease())
	accept(t, s, "sess", "a3", time.Minute)
	if st, _ := l2.Finish(ctx, Outcome{Code: OutcomeOK}); st != FinishFenced {
		t.Fatalf("finish after the lease vanished: %s", st)
	}
}

// After a Redis lost its data, no new fence epoch starts until the
// quarantine has passed, so a lease granted before the loss (still believed
// by its holder until its next renewal) cannot overlap a new one; once the
// quarantine is over, new sessions claim at once, in every slot (the
// routers marked them all when they saw the node change).
func TestNewEpochQuarantineAfterDataLoss(t *testing.T) {
	s := newStore(t) // flushed: like a Redis that lost its data
	// Long enough for MarkNodes (16,384 scripts) under the race detector.
	const quarantine = 2 * time.Second
	k := NewKeeper(KeeperParams{Store: s, Holder: "w1", TTL: time.Second, Logger: quietLogger(), NewEpochQuarantine: quarantine})
	t.Cleanup(k.Stop)
	if n, err := s.MarkNodes(ctx); err != nil || n != Slots {
		t.Fatalf("mark nodes on an empty Redis: %d %v, want every slot marked", n, err)
	}
	accept(t, s, "s1", "a1", time.Minute)
	_, res, err := k.Claim(ctx, "s1", "a1", "codex")
	if err != nil || res.Status != ClaimBusy || res.Wait <= 0 || res.Wait > quarantine {
		t.Fatalf("claim right after the data loss: %+v %v, want busy for up to %s", res, err, quarantine)
	}
	if n, err := s.MarkNodes(ctx); err != nil || n != 0 {
		t.Fatalf("mark nodes again on the same node: %d %v, want none changed", n, err)
	}
	time.Sleep(res.Wait)
	var l *Lease
	deadline := time.Now().Add(5 * time.Second)
	for l == nil && time.Now().Before(deadline) {
		l, res, err = k.Claim(ctx, "s1", "a1", "codex")
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if l == nil {
		t.Fatalf("no claim after the quarantine: %+v", res)
	}
	// A new session after the quarantine claims at once.
	accept(t, s, "s2", "b1", time.Minute)
	if _, res, err := k.Claim(ctx, "s2", "b1", "codex"); err != nil || res.Status != Claimed {
		t.Fatalf("new session after the quarantine: %+v %v", res, err)
	}
	// An existing epoch never waits.
	accept(t, s, "s1", "a2", time.Minute)
	if st, _ := l.Finish(ctx, Outcome{Code: OutcomeOK}); st != Finished {
		t.Fatal(st)
	}
	if _, res, err := k.Claim(ctx, "s1", "a2", "codex"); err != nil || res.Status != Claimed {
		t.Fatalf("next turn of a session with an epoch: %+v %v", res, err)
	}
}
