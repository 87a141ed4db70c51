package leases

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// promotion is a Redis primary and a replica that stops replicating (it is
// promoted, REPLICAOF NO ONE) while the primary goes on taking writes: the
// replica then lacks the primary's last, acknowledged writes, as a replica
// promoted by Sentinel or Redis Cluster after an asynchronous-replication
// failover does. The store's client follows the promotion as a
// Sentinel-aware client (or a DNS switch) would: once the primary is killed,
// it connects to the promoted replica.
type promotion struct {
	primary, replica *redisproc.Redis
	addr             atomic.Value // where the client connects
	rdb              *redis.Client
}

func newPromotion(t *testing.T) *promotion {
	t.Helper()
	p := &promotion{}
	var err error
	if p.primary, err = redisproc.Start(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.primary.Kill() })
	if p.replica, err = redisproc.Start(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.replica.Kill() })
	rc := p.replica.Client()
	defer rc.Close()
	if err := rc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(p.primary.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	p.addr.Store(p.primary.Addr())
	p.rdb = redis.NewClient(&redis.Options{
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, p.addr.Load().(string))
		},
		MaxRetries: 3,
	})
	t.Cleanup(func() { p.rdb.Close() })
	p.waitSynced(t)
	return p
}

// waitSynced waits until the replica has every write the primary made.
func (p *promotion) waitSynced(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := p.rdb.Do(ctx, "WAIT", 1, 100).Int()
		if err == nil && n == 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the replica did not catch up with the primary")
}

// detach promotes the replica: from now on it misses the primary's writes.
func (p *promotion) detach(t *testing.T) {
	t.Helper()
	rc := p.replica.Client()
	defer rc.Close()
	if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
}

// failOver kills the primary and points the client at the promoted replica.
func (p *promotion) failOver(t *testing.T) {
	t.Helper()
	if err := p.primary.Kill(); err != nil {
		t.Fatal(err)
	}
	p.addr.Store(p.replica.Addr())
	// Pooled connections to the dead primary fail once and are redialled.
	deadline := time.Now().Add(5 * time.Second)
	for p.rdb.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the client did not reach the promoted replica")
		}
	}
}

// The regression of the duplicate fence on a promoted replica that missed
// writes. The session's fence epoch (and its counter at n=1) reached the
// replica; the claim that took n=2 on the primary did not. After the
// failover, a new holder on the promoted replica must neither get the old
// holder's fence (…:2 again) nor start while the old holder may still be
// running, and the old holder's renewals must not succeed against the new
// holder's lease.
func TestPromotedReplicaThatMissedWritesNeverHandsAFenceOutTwice(t *testing.T) {
	p := newPromotion(t)
	s := NewStore(p.rdb)
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	// An earlier turn of the session, replicated: the epoch and n=1.
	k0 := NewKeeper(KeeperParams{Store: s, Holder: "w0", TTL: ttl, Logger: quietLogger(), NewEpochQuarantine: -1})
	t.Cleanup(k0.Stop)
	accept(t, s, "sess", "a0", time.Minute)
	l0 := mustClaim(t, k0, "sess", "a0")
	if st, err := l0.Finish(ctx, Outcome{Code: OutcomeOK}); err != nil || st != Finished {
		t.Fatalf("finish a0: %s %v", st, err)
	}
	p.waitSynced(t)
	p.detach(t)

	// On the primary only: the next turn, claimed by w1, which runs it.
	k1 := NewKeeper(KeeperParams{Store: s, Holder: "w1", TTL: ttl, Logger: quietLogger()})
	t.Cleanup(k1.Stop)
	accept(t, s, "sess", "a1", time.Minute)
	l1 := mustClaim(t, k1, "sess", "a1")

	p.failOver(t)
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// The gateway's next turn reaches the promoted replica (a1 is unknown
	// there), and w2 tries to claim it at once.
	k2 := NewKeeper(KeeperParams{Store: s, Holder: "w2", TTL: ttl, Logger: quietLogger()})
	t.Cleanup(k2.Stop)
	accept(t, s, "sess", "a2", time.Minute)
	l2, res, err := k2.Claim(ctx, "sess", "a2", "codex")
	if err != nil {
		t.Fatal(err)
	}
	if l2 != nil {
		if l2.Fence() == l1.Fence() {
			t.Fatalf("fence %s handed out twice: to w1 on the old primary and to w2 on the promoted replica", l1.Fence())
		}
		t.Fatalf("w2 claimed (fence %s) while w1's lease %s from the old primary may still be running", l2.Fence(), l1.Fence())
	}
	if res.Status != ClaimBusy || res.Wait <= 0 {
		t.Fatalf("w2's claim right after the failover: %+v, want busy with a quarantine", res)
	}

	// w1's renewal reaches the promoted replica, which never saw its lease.
	k1.RenewNow(ctx)
	select {
	case <-l1.done:
	default:
		t.Fatal("w1's renewal against the promoted replica succeeded: its lease was never granted there")
	}
	if !errors.Is(l1.Err(), teamster.ErrLeaseLost) {
		t.Fatalf("w1's lease ended with %v, want lease_lost", l1.Err())
	}

	// Once the quarantine has passed (every lease of the old primary has
	// self-fenced), w2 claims under a new epoch.
	var fence string
	deadline := time.Now().Add(3 * ttl)
	for fence == "" && time.Now().Before(deadline) {
		l2, res, err = k2.Claim(ctx, "sess", "a2", "codex")
		switch {
		case err != nil:
			t.Fatal(err)
		case l2 != nil:
			fence = l2.Fence()
		default:
			time.Sleep(max(res.Wait, 10*time.Millisecond))
		}
	}
	if fence == "" {
		t.Fatalf("w2 never claimed after the quarantine: %+v", res)
	}
	if epochOf(fence) == epochOf(l1.Fence()) {
		t.Fatalf("w2's fence %s continues the epoch of w1's %s, which the promoted replica cannot know the end of", fence, l1.Fence())
	}
	// w1, paused through all of this, wakes and tries to renew and finish
	// against w2's lease: refused.
	if n, err := renewScript.Run(ctx, s.rdb, []string{keysFor("sess").lease(), keysFor("sess").attempt("a1")},
		l1.Fence(), ttl.Milliseconds(), 1, "w1", "a1").Int(); err != nil || n != 0 {
		t.Fatalf("w1's renewal under w2's lease: %d %v, want refused", n, err)
	}
	if info, err := s.LeaseOf(ctx, "sess"); err != nil || info.Holder != "w2" || info.Fence != fence {
		t.Fatalf("the session's lease: %+v %v, want w2's under %s", info, err, fence)
	}
}

// An attempt whose claim was lost with the old primary (its record reached
// the replica as accepted, its queue message was acknowledged) is answered
// by the worker that ran it, and the session's later turns are not held
// behind it: the worker's lease loss records its outcome on the promoted
// replica.
func TestAClaimLostInAFailoverIsAnsweredByItsWorker(t *testing.T) {
	p := newPromotion(t)
	s := NewStore(p.rdb)
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	accept(t, s, "sess", "a1", time.Minute)
	p.waitSynced(t)
	p.detach(t)
	k1 := NewKeeper(KeeperParams{Store: s, Holder: "w1", TTL: ttl, Logger: quietLogger(), NewEpochQuarantine: -1})
	t.Cleanup(k1.Stop)
	l1 := mustClaim(t, k1, "sess", "a1")

	p.failOver(t)
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Attempt(ctx, "sess", "a1"); err != nil || rec.State != StateAccepted {
		t.Fatalf("a1 on the promoted replica: %+v %v, want accepted (its claim was lost)", rec, err)
	}
	k1.RenewNow(ctx)
	<-l1.done
	st, err := l1.Abandon(ctx, "lease_lost", []byte(`{"v":1}`))
	if err != nil || st != Finished {
		t.Fatalf("w1 records its lease_lost on the promoted replica: %s %v, want ok", st, err)
	}
	rec, err := s.Attempt(ctx, "sess", "a1")
	if err != nil || rec.State != StateFinished || rec.Outcome != "lease_lost" {
		t.Fatalf("a1 after w1's abandon: %+v %v, want finished lease_lost", rec, err)
	}
	if order, err := s.order(ctx, "sess"); err != nil || len(order) != 0 {
		t.Fatalf("the session's order: %q %v, want empty", order, err)
	}
	// The next turn is not held behind a1.
	k2 := NewKeeper(KeeperParams{Store: s, Holder: "w2", TTL: ttl, Logger: quietLogger(), NewEpochQuarantine: -1})
	t.Cleanup(k2.Stop)
	accept(t, s, "sess", "a2", time.Minute)
	if _, res, err := k2.Claim(ctx, "sess", "a2", "codex"); err != nil || res.Status != Claimed {
		t.Fatalf("the next turn: %+v %v, want claimed", res, err)
	}
}

func epochOf(fence string) string {
	e, _, _ := strings.Cut(fence, ":")
	return e
}
