package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/leases"
)

// session prune-state deletes the native state objects no record names (an
// older object of a session, an object of a session with no record) and
// keeps the one each record names; --older-than and --dry-run keep
// everything.
func TestCLIPrunesNativeState(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	ctx := context.Background()
	const key = "agent:main:prune"
	tag := leases.Tag(key)
	named := bus.StateObjectName(tag, "e1:2")
	older := bus.StateObjectName(tag, "e1:1")
	stray := bus.StateObjectName(leases.Tag("agent:main:no-record"), "e1:1")

	// The record names one object, as a finish that saved it would.
	if err := f.Client.SessionOp(ctx, leases.OpCreate, bus.SessionOp{V: bus.Version, SessionKey: key, SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if err := f.RDB.HSet(ctx, "teamster:{"+tag+"}:session", "nativeState", named).Err(); err != nil {
		t.Fatal(err)
	}
	nc := f.Connect("prune-test")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{named, older, stray} {
		if err := st.Put(ctx, name, []byte("state of "+name)); err != nil {
			t.Fatal(err)
		}
	}
	objects := func() []string { return testenv.StateObjects(t, nc) }
	all := []string{named, older, stray}
	slices.Sort(all)

	out, code := cli(t, f, "session", "prune-state", "--older-than", "0s", "--dry-run")
	if code != 0 || strings.Count(out, "would delete (--dry-run)") != 2 || !strings.Contains(out, named+" ") ||
		!strings.Contains(out, "kept: its session's record names it") || !strings.Contains(out, "3 objects, 0 deleted") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if got := objects(); !slices.Equal(got, all) {
		t.Fatalf("after the dry run: %q, want all three", got)
	}
	if out, code := cli(t, f, "session", "prune-state"); code != 0 || strings.Count(out, "kept: younger than --older-than") != 2 {
		t.Fatalf("default --older-than (10m): exit %d\n%s", code, out)
	}

	out, code = cli(t, f, "session", "prune-state", "--older-than", "0s", "-o", "json")
	var rows []struct {
		Object  string `json:"object"`
		Named   bool   `json:"named"`
		Deleted bool   `json:"deleted"`
	}
	jsonOut(t, out, &rows)
	if code != 0 || len(rows) != 3 {
		t.Fatalf("prune: exit %d, rows %+v\n%s", code, rows, out)
	}
	for _, r := range rows {
		if r.Deleted == (r.Object == named) || r.Named != (r.Object == named) {
			t.Errorf("row %+v: only %s is named, the others are deleted", r, named)
		}
	}
	if got := objects(); !slices.Equal(got, []string{named}) {
		t.Fatalf("after the prune: %q, want only %s", got, named)
	}
}
