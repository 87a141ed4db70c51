package leases

import (
	"errors"
	"testing"

	"github.com/teamster-fleet/teamster"
)

// Source authority: a grant makes exactly its generation current; a revoke is
// permanent for every generation up to the revoked one; a new grant must carry
// a higher generation.
func TestSourceAuthority(t *testing.T) {
	s := newStore(t)
	check := func(gen int64, want bool) {
		t.Helper()
		got, err := s.SourceCurrent(ctx, "chan-1", gen)
		if err != nil || got != want {
			t.Fatalf("generation %d current = %v (%v), want %v", gen, got, err, want)
		}
	}
	check(1, false)
	if err := s.GrantSource(ctx, "chan-1", 1); err != nil {
		t.Fatal(err)
	}
	check(1, true)
	check(2, false)
	if err := s.GrantSource(ctx, "chan-1", 3); err != nil {
		t.Fatal(err)
	}
	check(1, false)
	check(3, true)
	if err := s.GrantSource(ctx, "chan-1", 2); !errors.Is(err, teamster.ErrInvalidRequest) {
		t.Fatalf("lowering grant: %v, want invalid_request", err)
	}
	if n, err := s.RevokeSource(ctx, "chan-1"); err != nil || n != 3 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	check(3, false)
	for _, g := range []int64{1, 3} {
		if err := s.GrantSource(ctx, "chan-1", g); !errors.Is(err, teamster.ErrInvalidRequest) {
			t.Fatalf("re-grant of revoked generation %d: %v, want refused", g, err)
		}
		check(g, false)
	}
	if err := s.GrantSource(ctx, "chan-1", 4); err != nil {
		t.Fatal(err)
	}
	check(4, true)
	// Sources are independent.
	check2, _ := s.SourceCurrent(ctx, "chan-2", 4)
	if check2 {
		t.Fatal("another source inherited a grant")
	}
}
