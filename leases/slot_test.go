package leases

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Known slots from Redis's CLUSTER KEYSLOT, so the check below is the real one.
func TestHashSlotMatchesRedis(t *testing.T) {
	for key, want := range map[string]int{
		"foo": 12182, "bar": 5061, "123456789": 12739,
		"{user1000}.following": hashSlot("user1000"), "teamster:{abc}:lease": hashSlot("abc"),
	} {
		if got := hashSlot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	if hashSlot(keysFor("a").lease()) == hashSlot(keysFor("b").lease()) && Tag("a") == Tag("b") {
		t.Error("two sessions share a tag")
	}
}

// Every script is given keys of one hash slot only. The client hook installed
// by newStore checks each script call of every test in this package; this
// test runs every script once more and shows the check covered all of them.
func TestEveryScriptIsGivenKeysOfOneSlot(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	accept(t, s, "sess", "a1", time.Minute)
	accept(t, s, "sess", "a2", time.Minute)
	accept(t, s, "sess", "a3", time.Minute)
	if _, err := s.Unaccept(ctx, "sess", "a3"); err != nil {
		t.Fatal(err)
	}
	l := mustClaim(t, k, "sess", "a1")
	k.RenewNow(ctx)
	if st, _ := l.Finish(ctx, Outcome{Code: OutcomeOK}); st != Finished {
		t.Fatal(st)
	}
	l2 := mustClaim(t, k, "sess", "a2")
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Abandon(ctx, "lease_lost", nil); err != nil {
		t.Fatal(err)
	}
	accept(t, s, "sess", "a4", time.Minute)
	l4 := mustClaim(t, k, "sess", "a4")
	if _, err := l4.Unclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkPublished(ctx, "sess", "a1", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ConfirmSent(ctx, "sess", "a1", "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Due(ctx, 10, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reap(ctx, DueEntry{Tag: Tag("sess"), AttemptID: "a1"}, 0, "reaper-test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Adopt(ctx, Tag("sess"), "a1", OutcomeOK); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkNodes(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.GrantSource(ctx, "src", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeSource(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionOp(ctx, "sess", OpPatch, FieldsOf("sess", "s1", "", "", "", nil)); err != nil {
		t.Fatal(err)
	}
	kq := NewKeeper(KeeperParams{Store: s, Holder: "w2", TTL: time.Second, Logger: quietLogger(), NewEpochQuarantine: time.Second})
	t.Cleanup(kq.Stop)
	accept(t, s, "fresh", "q1", time.Minute)
	if _, _, err := kq.Claim(ctx, "fresh", "q1", "codex"); err != nil {
		t.Fatal(err)
	}
	for _, sc := range allScripts {
		if _, ok := scriptsSeen.Load(sc.Hash()); !ok {
			t.Errorf("script %s was never called, so its keys were never checked", sc.Hash()[:8])
		}
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }
