package leases

import (
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

// A keeper starts its loop on first use and stops everything it started: the
// loop, the renewal round and the index batch it had in flight.
func TestKeeperStopEndsEverythingItStarted(t *testing.T) {
	s := newStore(t)
	clock := clockwork.NewFakeClock()
	rounds := make(chan error, 4)
	baseline := goleak.IgnoreCurrent()
	k := NewKeeper(KeeperParams{Store: s, Holder: "w1", TTL: 9 * time.Second, Clock: clock, Logger: quietLogger(), NewEpochQuarantine: -1,
		OnRenew: func(_ int, err error) { rounds <- err }})
	if k.isLaunched() || k.Len() != 0 {
		t.Fatal("a new keeper runs its loop before it is used")
	}
	k.Start()
	for _, id := range []string{"a1", "a2", "a3"} {
		accept(t, s, "sess-"+id, id, time.Minute)
		mustClaim(t, k, "sess-"+id, id)
	}
	clock.Advance(3 * time.Second)
	if err := <-rounds; err != nil {
		t.Fatalf("renewal round: %v", err)
	}
	if got := k.Len(); got != 3 {
		t.Fatalf("keeper holds %d leases, want 3", got)
	}
	k.Stop()
	k.Stop() // twice: nothing more
	if got := k.Len(); got != 3 {
		t.Fatalf("a stopped keeper reports %d leases, want the 3 it held (they were not released)", got)
	}
	testenv.VerifyNoLeaks(t, baseline)
}

// The renewal ticker exists when Start returns (a fake clock advanced at once
// moves it), and a second Start adds no second ticker.
func TestKeeperStartArmsOneTickerBeforeReturning(t *testing.T) {
	s := newStore(t)
	clock := clockwork.NewFakeClock()
	rounds := make(chan error, 8)
	k := NewKeeper(KeeperParams{Store: s, Holder: "w1", TTL: 9 * time.Second, Clock: clock, Logger: quietLogger(), NewEpochQuarantine: -1,
		OnRenew: func(_ int, err error) { rounds <- err }})
	t.Cleanup(k.Stop)
	accept(t, s, "sess", "a1", time.Minute)
	mustClaim(t, k, "sess", "a1") // the loop runs before Start, without ticking
	k.Start()
	k.Start()
	clock.Advance(3 * time.Second)
	select {
	case err := <-rounds:
		if err != nil {
			t.Fatalf("renewal round: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal round after one interval")
	}
	select {
	case <-rounds:
		t.Fatal("two renewal rounds for one tick: Start armed two tickers")
	case <-time.After(200 * time.Millisecond):
	}
}

// A keeper used without Start never renews on its own: its leases self-fence
// unless RenewNow is called.
func TestKeeperWithoutStartDoesNotTick(t *testing.T) {
	s := newStore(t)
	clock := clockwork.NewFakeClock()
	k := newKeeper(t, s, "w1", 9*time.Second, clock)
	accept(t, s, "sess", "a1", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	clock.Advance(3 * time.Second) // an interval: no round
	clock.Advance(4200 * time.Millisecond)
	waitDone(t, l, "self-fence without renewals")
	if !errors.Is(l.Err(), teamster.ErrLeaseLost) {
		t.Fatalf("lease error %v, want lease_lost", l.Err())
	}
}

// Whoever sees a lease's Done closed also sees the keeper no longer hold it:
// the loop drops the lease before Done closes, whichever way it ended.
func TestDoneClosedMeansNotHeld(t *testing.T) {
	s := newStore(t)
	clock := clockwork.NewFakeClock()
	k := newKeeper(t, s, "w1", 10*time.Second, clock)
	for i := range 30 {
		id := attemptID(i)
		accept(t, s, "sess", id, time.Minute)
		l := mustClaim(t, k, "sess", id)
		if got := k.Len(); got != 1 {
			t.Fatalf("claim %d: keeper holds %d leases, want 1", i, got)
		}
		switch i % 3 {
		case 0: // self-fence
			clock.Advance(8 * time.Second)
			waitDone(t, l, "self-fence")
			if _, err := l.Abandon(ctx, string(teamster.CodeLeaseLost), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		case 1: // finish
			if st, err := l.Finish(ctx, Outcome{Code: OutcomeOK}); err != nil || st != Finished {
				t.Fatalf("finish: %s %v", st, err)
			}
		case 2: // a renewal Redis refuses
			s.rdb.Del(ctx, keysFor("sess").lease())
			k.RenewNow(ctx)
			if _, err := l.Abandon(ctx, string(teamster.CodeLeaseLost), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		<-l.done
		if got := k.Len(); got != 0 {
			t.Fatalf("claim %d (way %d): Done closed while the keeper still holds %d leases", i, i%3, got)
		}
	}
}

// A lease that ended before the loop got it (its self-fence timer fired
// first, with a short TTL or a slow claim reply) is never held, so nothing
// renews it.
func TestEndedLeaseIsNeverAdopted(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	keys := keysFor("sess")
	l := &Lease{k: k, keys: keys, attemptID: "a1", fence: "e:1", done: make(chan struct{}), leaseKey: keys.lease(), attemptKey: keys.attempt("a1")}
	l.lose("self-fenced before the claim returned")
	k.adopt(l, nil)
	if got := k.Len(); got != 0 {
		t.Fatalf("keeper holds %d leases, want none: the lease had ended", got)
	}
}

// Stop sends the index moves already queued before it returns, and a claim
// after Stop still answers, with a lease the keeper does not hold.
func TestStopSendsQueuedIndexMovesAndHoldsNothingAfter(t *testing.T) {
	s := newStore(t)
	k := NewKeeper(KeeperParams{Store: s, Holder: "w1", TTL: 5 * time.Second, Logger: quietLogger(), NewEpochQuarantine: -1})
	accept(t, s, "sess", "a1", time.Hour)
	if _, res, err := k.Claim(ctx, "sess", "a1", "codex"); err != nil || res.Status != Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	k.Stop() // no pointing.Wait: Stop itself sends the move
	score, err := s.rdb.ZScore(ctx, keysFor("sess").index(), indexMember(keysFor("sess").tag, "a1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if at := time.UnixMilli(int64(score)); at.After(time.Now().Add(5 * time.Second)) {
		t.Fatalf("index entry due at %s after Stop, want the lease's expiry (the move was not sent)", at.Format(time.RFC3339Nano))
	}

	accept(t, s, "sess2", "b1", time.Minute)
	l, res, err := k.Claim(ctx, "sess2", "b1", "codex")
	if err != nil || res.Status != Claimed || l == nil {
		t.Fatalf("claim after Stop: %+v %v", res, err)
	}
	if got := k.Len(); got != 1 {
		t.Fatalf("stopped keeper holds %d leases, want only a1's", got)
	}
	k.Start() // after Stop: nothing
	if k.Len() != 1 {
		t.Fatal("Start after Stop changed what the keeper holds")
	}
}

// Reaper index scores are on the wall clock, whatever clock the keeper
// measures its leases on: the reaper's due script compares them with Redis's
// TIME. A keeper on a fake clock stuck in 1970 still points the reapers at the
// lease's real expiry.
func TestIndexScoresAreRedisWallClock(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, clockwork.NewFakeClockAt(time.Unix(1, 0)))
	accept(t, s, "sess", "a1", time.Hour)
	key, member := keysFor("sess").index(), indexMember(keysFor("sess").tag, "a1")
	check := func(what string) {
		t.Helper()
		before := time.Now()
		score, err := s.rdb.ZScore(ctx, key, member).Result()
		if err != nil {
			t.Fatal(err)
		}
		if at := time.UnixMilli(int64(score)); at.Before(before.Add(4*time.Second)) || at.After(time.Now().Add(5*time.Second)) {
			t.Fatalf("%s: index entry due at %s, want about %s (wall clock + ttl)", what, at.Format(time.RFC3339Nano), before.Add(5*time.Second).Format(time.RFC3339Nano))
		}
	}
	l := mustClaim(t, k, "sess", "a1")
	check("after the claim")
	k.RenewNow(ctx)
	check("after a renewal")
	if !l.Current() {
		t.Fatal("lease not current on its own clock")
	}
}
