package leases

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
)

// Contenders for one session never both hold it: each of several goroutines,
// with its own keeper (its own worker id), appends attempts to one session and
// claims them as they reach the head; whoever holds the lease checks it is
// alone, and every fence is greater than the one before it.
func TestContendersNeverBothHoldASession(t *testing.T) {
	s := newStore(t)
	const contenders, rounds = 8, 250 // 2,000 claims of one session
	session := "agent:main:contended"
	var (
		inside    atomic.Int32
		overlaps  atomic.Int32
		mu        sync.Mutex
		lastFence int64
		epoch     string
		claims    int
	)
	var wg sync.WaitGroup
	for c := 0; c < contenders; c++ {
		k := newKeeper(t, s, fmt.Sprintf("w%d", c), 5*time.Second, nil)
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				id := fmt.Sprintf("c%d-r%d", c, r)
				if _, err := s.Accept(ctx, AcceptArgs{SessionKey: session, AttemptID: id, HarnessID: "codex",
					QueueTimeout: time.Minute, RunBudget: time.Minute}); err != nil {
					t.Errorf("accept: %v", err)
					return
				}
				var l *Lease
				for l == nil {
					var res ClaimResult
					var err error
					l, res, err = k.Claim(ctx, session, id, "codex")
					if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					if res.Status != Claimed && res.Status != ClaimBusy {
						t.Errorf("claim %s: %s", id, res.Status)
						return
					}
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				e, n := parseFence(t, l.Fence())
				mu.Lock()
				if epoch == "" {
					epoch = e
				}
				if e != epoch || n <= lastFence {
					t.Errorf("fence %s after %s:%d: fences must strictly increase within one epoch", l.Fence(), epoch, lastFence)
				}
				lastFence = n
				claims++
				mu.Unlock()
				inside.Add(-1)
				st, err := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{}`)})
				if err != nil || st != Finished {
					t.Errorf("finish %s: %s %v", id, st, err)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d claims overlapped another holder", overlaps.Load())
	}
	if claims != contenders*rounds {
		t.Fatalf("%d claims, want %d", claims, contenders*rounds)
	}
}

// A claim while another attempt holds the session's lease is busy, and the
// lease names its holder and attempt.
func TestClaimIsExclusive(t *testing.T) {
	s := newStore(t)
	k1 := newKeeper(t, s, "w1", 5*time.Second, nil)
	k2 := newKeeper(t, s, "w2", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	accept(t, s, "sess", "a2", time.Minute)
	l := mustClaim(t, k1, "sess", "a1")
	if _, res, _ := k2.Claim(ctx, "sess", "a2", "codex"); res.Status != ClaimBusy || res.Blocker != "a1" {
		t.Fatalf("second claim: %+v, want busy behind a1", res)
	}
	if _, res, _ := k2.Claim(ctx, "sess", "a1", "codex"); res.Status != ClaimDone {
		t.Fatalf("claiming a claimed attempt again: %+v, want done", res)
	}
	info, err := s.LeaseOf(ctx, "sess")
	if err != nil || info.Holder != "w1" || info.AttemptID != "a1" || info.Fence != l.Fence() {
		t.Fatalf("lease record %+v (%v)", info, err)
	}
	if info.TTL <= 0 || info.TTL > 5*time.Second {
		t.Fatalf("lease TTL %s, want within (0, 5s]", info.TTL)
	}
}

// After FLUSHALL the fence hash is gone: the next claim starts a new epoch, and
// every renew, finish or release with a fence of the old epoch is refused.
func TestFlushAllStartsNewEpochAndRefusesOldFences(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	old := mustClaim(t, k, "sess", "a1")
	oldEpoch, _ := parseFence(t, old.Fence())

	if err := s.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	k.RenewNow(ctx)
	waitDone(t, old, "renewal after FLUSHALL")
	if !errors.Is(old.Err(), teamster.ErrLeaseLost) {
		t.Fatalf("lost lease error %v, want lease_lost", old.Err())
	}

	accept(t, s, "sess", "a2", time.Minute)
	fresh := mustClaim(t, k, "sess", "a2")
	newEpoch, n := parseFence(t, fresh.Fence())
	if newEpoch == oldEpoch || n != 1 {
		t.Fatalf("fence after FLUSHALL %s; want a new epoch (old %s) starting at 1", fresh.Fence(), oldEpoch)
	}
	assertOldFenceRefused(t, s, "sess", "a2", old.Fence())
}

// A redis-server restarted without persistence is like FLUSHALL, and the
// scripts are gone from its cache too: the keeper reloads them, the old fence
// is refused, a new epoch starts.
func TestRedisRestartStartsNewEpochAndRefusesOldFences(t *testing.T) {
	r := newPrivateRedis(t)
	s := storeOn(t, r.Addr())
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	old := mustClaim(t, k, "sess", "a1")
	oldEpoch, _ := parseFence(t, old.Fence())

	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	waitRedis(t, s)
	k.RenewNow(ctx)
	waitDone(t, old, "renewal after restart")

	accept(t, s, "sess", "a2", time.Minute)
	fresh := mustClaim(t, k, "sess", "a2")
	if e, _ := parseFence(t, fresh.Fence()); e == oldEpoch {
		t.Fatalf("epoch %s survived a restart without persistence", e)
	}
	assertOldFenceRefused(t, s, "sess", "a2", old.Fence())
	if st, err := old.Finish(ctx, Outcome{Code: OutcomeOK}); err != nil || st != FinishFenced {
		t.Fatalf("finish through the lost lease: %s %v, want fenced", st, err)
	}
}

// assertOldFenceRefused calls renew, finish, release and the session write
// directly with an old fence while attempt holds the session under a new one,
// and checks Redis refuses each and the live lease is untouched.
func assertOldFenceRefused(t *testing.T, s *Store, session, attempt, oldFence string) {
	t.Helper()
	k := keysFor(session)
	before, err := s.LeaseOf(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := renewScript.Run(ctx, s.rdb, []string{k.lease(), k.attempt(attempt)}, oldFence, 60000, 1, before.Holder, attempt).Int(); err != nil || n != 0 {
		t.Errorf("renew with old fence: %d %v, want refused (0)", n, err)
	}
	if st, err := finishScript.Run(ctx, s.rdb, []string{k.order(), k.attempt(attempt), k.lease(), k.session()},
		attempt, oldFence, OutcomeOK, "{}", 1000, before.Holder, teamster.SessionFieldSessionID, "stolen").Text(); err != nil || st != "fenced" {
		t.Errorf("finish with old fence: %q %v, want fenced", st, err)
	}
	if n, err := releaseScript.Run(ctx, s.rdb, []string{k.lease()}, oldFence, before.Holder, attempt).Int(); err != nil || n != 0 {
		t.Errorf("release with old fence: %d %v, want refused (0)", n, err)
	}
	after, err := s.LeaseOf(ctx, session)
	if err != nil || after.Fence != before.Fence || after.AttemptID != attempt {
		t.Errorf("lease after refused writes: %+v (%v), want untouched %+v", after, err, before)
	}
	if rec, err := s.Attempt(ctx, session, attempt); err != nil || rec.Outcome != "" {
		t.Errorf("attempt record after refused finish: %+v (%v), want no outcome", rec, err)
	}
	if _, err := s.Session(ctx, session); !errors.Is(err, ErrNotFound) {
		t.Errorf("session record after refused writes: %v, want none written", err)
	}
}

// Renewing N leases is one round trip: one pipeline, no other command,
// counted by a client hook.
func TestRenewingManyLeasesIsOneRoundTrip(t *testing.T) {
	s := newStore(t)
	counter := &roundTrips{}
	s.rdb.(*redis.Client).AddHook(counter)
	k := newKeeper(t, s, "w1", 10*time.Second, nil)
	const n = 200
	for i := 0; i < n; i++ {
		session := fmt.Sprintf("sess-%d", i)
		accept(t, s, session, session+"-a1", time.Minute)
		mustClaim(t, k, session, session+"-a1")
	}
	counter.reset()
	k.RenewNow(ctx)
	single, pipes, cmds := counter.get()
	if single != 0 || pipes != 1 {
		t.Fatalf("renewing %d leases took %d single commands and %d pipelines; want one pipeline", n, single, pipes)
	}
	shards := map[string]bool{}
	for _, l := range k.held() {
		shards[l.keys.index()] = true
	}
	if cmds != n+len(shards) {
		t.Fatalf("the pipeline held %d commands, want %d renew scripts and one index update per shard (%d)", cmds, n, len(shards))
	}
	for _, l := range k.held() {
		if !l.Current() {
			t.Fatalf("lease %s not current after renewal", l.AttemptID())
		}
	}
}

type roundTrips struct {
	mu                  sync.Mutex
	single, pipes, cmds int
}

func (r *roundTrips) reset() { r.mu.Lock(); r.single, r.pipes, r.cmds = 0, 0, 0; r.mu.Unlock() }
func (r *roundTrips) get() (int, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.single, r.pipes, r.cmds
}
func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(c context.Context, cmd redis.Cmder) error {
		if connSetup(cmd) {
			return next(c, cmd)
		}
		r.mu.Lock()
		r.single++
		r.mu.Unlock()
		return next(c, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(c context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && connSetup(cmds[0]) {
			return next(c, cmds)
		}
		r.mu.Lock()
		r.pipes++
		r.cmds += len(cmds)
		r.mu.Unlock()
		return next(c, cmds)
	}
}

// connSetup tells the commands go-redis sends when it dials a new pooled
// connection (HELLO, CLIENT SETINFO, ...): they belong to the pool, not to the
// operation being counted.
func connSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// A lease whose renewals fail reports itself lost (Done closes) at ttl - margin
// after its last successful renewal, before Redis would let it expire at ttl.
// The clock is fake, so the check is exact; Redis is really killed.
func TestLeaseSelfFencesBeforeRedisExpiry(t *testing.T) {
	r := newPrivateRedis(t)
	s := storeOn(t, r.Addr())
	clock := clockwork.NewFakeClock()
	rounds := make(chan error, 16)
	const ttl = 9 * time.Second // renew every 3s, margin 1.8s: self-fence at 7.2s
	k := NewKeeper(KeeperParams{Store: s, Holder: "w1", TTL: ttl, Clock: clock, Logger: quietLogger(), NewEpochQuarantine: -1,
		OnRenew: func(_ int, err error) { rounds <- err }})
	k.Start()
	t.Cleanup(k.Stop)
	accept(t, s, "sess", "a1", time.Minute)
	l := mustClaim(t, k, "sess", "a1")

	// One good renewal at t=3s.
	clock.Advance(3 * time.Second)
	if err := <-rounds; err != nil {
		t.Fatalf("renewal with Redis up: %v", err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	// Renewals at t=6s and t=9s fail. The lease was last renewed at t=3s, so
	// it must stay held until t=3s+7.2s and be lost exactly then.
	clock.Advance(3 * time.Second)
	if err := <-rounds; err == nil {
		t.Fatal("renewal with Redis killed succeeded")
	}
	clock.Advance(4200*time.Millisecond - time.Millisecond) // t = 10.2s - 1ms
	assertHeld(t, l)
	clock.Advance(time.Millisecond) // t = 10.2s = last renewal + ttl - margin
	waitDone(t, l, "self-fence")
	if l.Current() {
		t.Fatal("a lost lease reports Current")
	}
	if !errors.Is(l.Err(), teamster.ErrLeaseLost) {
		t.Fatalf("lost lease error %v, want lease_lost", l.Err())
	}
	if k.Len() != 0 {
		t.Fatalf("keeper still holds %d leases", k.Len())
	}
}

// Current is checked at the moment of the call: a holder that wakes after a
// pause longer than ttl - margin sees false before any timer has run.
func TestCurrentIsFalseAfterAPausePastTheMargin(t *testing.T) {
	s := newStore(t)
	clock := clockwork.NewFakeClock()
	k := newKeeper(t, s, "w1", 10*time.Second, clock)
	accept(t, s, "sess", "a1", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	if !l.Current() {
		t.Fatal("fresh lease not current")
	}
	clock.Advance(8 * time.Second) // ttl - margin (10s - 2s)
	if l.Current() {
		t.Fatal("lease current 8s after its last renewal with ttl 10s, margin 2s")
	}
	if st, err := l.Finish(ctx, Outcome{Code: OutcomeOK}); err != nil || st != FinishFenced {
		t.Fatalf("finish after the margin: %s %v, want fenced without a write", st, err)
	}
	if rec, _ := s.Attempt(ctx, "sess", "a1"); rec.Outcome != "" {
		t.Fatalf("outcome %q written by a holder past its margin", rec.Outcome)
	}
}

// Finish records the outcome, writes the session record, pops the order and
// releases the lease in one step.
func TestFinishCommitsEverythingAtOnce(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	accept(t, s, "sess", "a2", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	rec := teamster.SessionRecord{SessionKey: "sess", SessionID: "s-1", StorePath: "/tmp/store", AgentID: "main",
		ModelSelectionLocked: true, AgentHarnessID: "codex", OwnerPluginID: "codex", NativeBinding: `{"thread":"t1"}`}
	st, err := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{"ok":true}`), Session: OwnerUpdate(rec)})
	if err != nil || st != Finished {
		t.Fatalf("finish: %s %v", st, err)
	}
	waitDone(t, l, "finish")
	if !errors.Is(l.Err(), errReleased) {
		t.Fatalf("finished lease error %v, want released", l.Err())
	}
	got, err := s.Session(ctx, "sess")
	if err != nil {
		t.Fatal(err)
	}
	if got.SessionID != "s-1" || got.StorePath != "/tmp/store" || got.AgentID != "main" || !got.ModelSelectionLocked ||
		got.AgentHarnessID != "codex" || got.OwnerPluginID != "codex" || got.NativeBinding != `{"thread":"t1"}` || got.Fence != l.Fence() {
		t.Fatalf("session record %+v", got)
	}
	if _, err := s.LeaseOf(ctx, "sess"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lease after finish: %v, want released", err)
	}
	if order, _ := s.order(ctx, "sess"); len(order) != 1 || order[0] != "a2" {
		t.Fatalf("order after finish %v, want [a2]", order)
	}
	a, _ := s.Attempt(ctx, "sess", "a1")
	if a.State != StateFinished || a.Outcome != OutcomeOK || string(a.Result) != `{"ok":true}` {
		t.Fatalf("attempt record %+v", a)
	}
	// The next claim reads the record under its new lease: the same record.
	l2, res, err := k.Claim(ctx, "sess", "a2", "codex")
	if err != nil || res.Status != Claimed {
		t.Fatalf("claim a2: %v %s", err, res.Status)
	}
	k.pointing.Wait()
	if res.Session == nil || *res.Session != *got {
		t.Fatalf("the claim read session record %+v, want %+v", res.Session, got)
	}
	// A delegate's turn writes only the binding.
	if st, _ := l2.Finish(ctx, Outcome{Code: OutcomeOK, Session: BindingUpdate(`{"thread":"t2"}`, "")}); st != Finished {
		t.Fatalf("second finish %s", st)
	}
	got, _ = s.Session(ctx, "sess")
	if got.NativeBinding != `{"thread":"t2"}` || got.SessionID != "s-1" || got.AgentHarnessID != "codex" {
		t.Fatalf("session after binding update %+v", got)
	}
	// An owner's turn that reports no binding deletes the stored one (an
	// empty value deletes its field) and writes the rest, under its fence.
	accept(t, s, "sess", "a3", time.Minute)
	l3 := mustClaim(t, k, "sess", "a3")
	rec.SessionID, rec.NativeBinding = "s-2", ""
	if st, _ := l3.Finish(ctx, Outcome{Code: OutcomeOK, Session: OwnerUpdate(rec)}); st != Finished {
		t.Fatalf("third finish %s", st)
	}
	got, _ = s.Session(ctx, "sess")
	if got.NativeBinding != "" || got.SessionID != "s-2" || got.StorePath != "/tmp/store" || got.Fence != l3.Fence() {
		t.Fatalf("session after an owner turn without a binding %+v", got)
	}
	if stored, _ := s.rdb.HExists(ctx, keysFor("sess").session(), teamster.SessionFieldNativeBinding).Result(); stored {
		t.Fatal("the nativeBinding field is still stored")
	}
}

// The outcome is first-writer-wins: a second finish, a fleet worker_lost after
// a finish, and an abandon after a worker_lost each leave the first outcome.
func TestOutcomeIsFirstWriterWins(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)

	accept(t, s, "s1", "a1", time.Minute)
	l := mustClaim(t, k, "s1", "a1")
	if st, _ := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte("first")}); st != Finished {
		t.Fatalf("first finish %s", st)
	}
	k1 := keysFor("s1")
	if st, _ := finishScript.Run(ctx, s.rdb, []string{k1.order(), k1.attempt("a1"), k1.lease(), k1.session()},
		"a1", l.Fence(), "harness_failed", "second", 1000, "w1").Text(); st != "finished" {
		t.Fatalf("second finish %q, want finished", st)
	}
	if st, _ := l.Abandon(ctx, "lease_lost", []byte("third")); st != FinishAlready {
		t.Fatalf("abandon after finish %s, want finished", st)
	}
	if a, _ := s.Attempt(ctx, "s1", "a1"); a.Outcome != OutcomeOK || string(a.Result) != "first" {
		t.Fatalf("outcome %q %q, want the first writer's", a.Outcome, a.Result)
	}

	// worker_lost first (lease gone), then the worker's abandon.
	accept(t, s, "s2", "b1", time.Minute)
	lb := mustClaim(t, k, "s2", "b1")
	k2 := keysFor("s2")
	s.rdb.Del(ctx, k2.lease()) // the lease expired
	got, err := s.Reap(ctx, DueEntry{Tag: k2.tag, AttemptID: "b1"}, time.Second, "reaper-test")
	if err != nil || got.Action != ReapPublish || got.Outcome != string(teamster.CodeWorkerLost) {
		t.Fatalf("reap %+v %v, want publish worker_lost", got, err)
	}
	if st, _ := lb.Abandon(ctx, "lease_lost", []byte("late")); st != FinishAlready {
		t.Fatalf("abandon after worker_lost %s, want finished", st)
	}
	if a, _ := s.Attempt(ctx, "s2", "b1"); a.Outcome != string(teamster.CodeWorkerLost) {
		t.Fatalf("outcome %q, want worker_lost", a.Outcome)
	}
}

// Abandon records a lease_lost outcome for an attempt whose lease expired,
// frees the session for its next turn, and writes no session record.
func TestAbandonAfterLeaseLoss(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	accept(t, s, "sess", "a2", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	s.rdb.Del(ctx, keysFor("sess").lease())
	if st, err := l.Abandon(ctx, string(teamster.CodeLeaseLost), []byte("r")); err != nil || st != Finished {
		t.Fatalf("abandon %s %v", st, err)
	}
	if a, _ := s.Attempt(ctx, "sess", "a1"); a.Outcome != string(teamster.CodeLeaseLost) {
		t.Fatalf("outcome %q", a.Outcome)
	}
	if _, err := s.Session(ctx, "sess"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("abandon wrote a session record: %v", err)
	}
	mustClaim(t, k, "sess", "a2")
}

// Event seq numbers beyond the claim's reservation extend it in Redis before
// they are sent; renewals carry the reservation forward.
func TestSeqReservation(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	if a, _ := s.Attempt(ctx, "sess", "a1"); a.SeqMax != SeqReservation {
		t.Fatalf("seqmax after claim %d, want %d", a.SeqMax, SeqReservation)
	}
	if err := l.NoteSeq(ctx, SeqReservation+1); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Attempt(ctx, "sess", "a1")
	if a.SeqMax < SeqReservation+1 {
		t.Fatalf("seqmax %d after sending seq %d", a.SeqMax, SeqReservation+1)
	}
	k.RenewNow(ctx)
	b, _ := s.Attempt(ctx, "sess", "a1")
	if b.SeqMax < a.SeqMax {
		t.Fatalf("renewal lowered seqmax from %d to %d", a.SeqMax, b.SeqMax)
	}
}

func assertHeld(t *testing.T, l *Lease) {
	t.Helper()
	select {
	case <-l.done:
		t.Fatalf("lease lost early: %v", l.Err())
	default:
	}
	if !l.Current() {
		t.Fatal("lease not current")
	}
}

func waitDone(t *testing.T, l *Lease, what string) {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: lease Done not closed", what)
	}
}

// Lease operations compare holder, attempt and fence, not the fence alone:
// after a failover that lost writes, another holder could come to hold a
// lease under a fence equal to one handed out before. Each script, given
// the live lease's fence with another holder or another attempt, refuses
// and leaves the lease and the records as they were.
func TestLeaseOperationsCompareHolderAttemptAndFence(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	keys, fence := keysFor("sess"), l.Fence()
	for _, who := range []struct{ holder, attempt string }{{"w2", "a1"}, {"w1", "a2"}} {
		if n, err := renewScript.Run(ctx, s.rdb, []string{keys.lease(), keys.attempt("a1")}, fence, 60000, 1, who.holder, who.attempt).Int(); err != nil || n != 0 {
			t.Errorf("renew as %+v: %d %v, want refused", who, n, err)
		}
		if n, err := releaseScript.Run(ctx, s.rdb, []string{keys.lease()}, fence, who.holder, who.attempt).Int(); err != nil || n != 0 {
			t.Errorf("release as %+v: %d %v, want refused", who, n, err)
		}
		if who.attempt == "a1" {
			if st, err := finishScript.Run(ctx, s.rdb, []string{keys.order(), keys.attempt("a1"), keys.lease(), keys.session()},
				"a1", fence, OutcomeOK, "{}", 1000, who.holder, teamster.SessionFieldSessionID, "stolen").Text(); err != nil || st != "fenced" {
				t.Errorf("finish as %+v: %q %v, want fenced", who, st, err)
			}
		}
	}
	info, err := s.LeaseOf(ctx, "sess")
	if err != nil || info.Holder != "w1" || info.AttemptID != "a1" || info.Fence != fence {
		t.Fatalf("lease after refused operations: %+v %v, want w1's for a1 under %s", info, err, fence)
	}
	if rec, err := s.Attempt(ctx, "sess", "a1"); err != nil || rec.Outcome != "" {
		t.Fatalf("attempt record: %+v %v, want no outcome", rec, err)
	}
	if _, err := s.Session(ctx, "sess"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("session record: %v, want none written", err)
	}
}
