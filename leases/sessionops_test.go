package leases

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Session operations refuse while a turn runs, create only new records,
// patch and reset only existing ones; reset clears the binding and the lock;
// delete removes the record.
func TestSessionOps(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	locked := true
	if r, err := s.SessionOp(ctx, "sess", OpPatch, FieldsOf("sess", "s1", "", "", "", nil)); err != nil || r.Status != SessionOpMissing {
		t.Fatalf("patch of no record: %+v %v", r, err)
	}
	if r, err := s.SessionOp(ctx, "sess", OpCreate, FieldsOf("sess", "s1", "/store", "main", "codex", &locked)); err != nil || r.Status != SessionOpOK {
		t.Fatalf("create: %+v %v", r, err)
	}
	if r, _ := s.SessionOp(ctx, "sess", OpCreate, FieldsOf("sess", "s2", "", "", "", nil)); r.Status != SessionOpExists {
		t.Fatalf("second create: %+v", r)
	}
	// A turn writes the binding; while it runs every op is busy.
	accept(t, s, "sess", "a1", time.Minute)
	l := mustClaim(t, k, "sess", "a1")
	for _, op := range []string{OpCreate, OpPatch, OpReset, OpDelete, OpArchive} {
		if r, _ := s.SessionOp(ctx, "sess", op, FieldsOf("sess", "", "", "", "", nil)); r.Status != SessionOpBusy {
			t.Fatalf("%s while a turn runs: %+v, want busy", op, r)
		}
	}
	if st, _ := l.Finish(ctx, Outcome{Code: OutcomeOK, Session: BindingUpdate(`{"thread":"t1"}`, "state-1")}); st != Finished {
		t.Fatal(st)
	}
	if rec, _ := s.Session(ctx, "sess"); rec.NativeState != "state-1" {
		t.Fatalf("the turn wrote native state %q, want state-1", rec.NativeState)
	}
	r, err := s.SessionOp(ctx, "sess", OpReset, FieldsOf("sess", "s2", "", "", "", nil))
	if err != nil || r.Status != SessionOpOK || r.PreviousBinding != `{"thread":"t1"}` || r.PinnedHarness != "codex" || r.PreviousState != "state-1" {
		t.Fatalf("reset: %+v %v", r, err)
	}
	rec, _ := s.Session(ctx, "sess")
	if rec.NativeBinding != "" || rec.NativeState != "" || rec.ModelSelectionLocked || rec.SessionID != "s2" || rec.AgentHarnessID != "codex" {
		t.Fatalf("after reset %+v", rec)
	}
	if r, _ := s.SessionOp(ctx, "sess", OpArchive, nil); r.Status != SessionOpOK {
		t.Fatal(r)
	}
	if rec, _ := s.Session(ctx, "sess"); !rec.Archived || rec.ModelSelectionLocked {
		t.Fatalf("after archive %+v", rec)
	}
	// Booleans are stored one way in the record: "true" or "false".
	stored, err := s.rdb.HMGet(ctx, keysFor("sess").session(), teamster.SessionFieldArchived, teamster.SessionFieldModelSelectionLocked).Result()
	if err != nil || stored[0] != "true" || stored[1] != "false" {
		t.Fatalf("archived, modelSelectionLocked stored as %q (%v), want \"true\", \"false\"", stored, err)
	}
	if r, _ := s.SessionOp(ctx, "sess", OpDelete, nil); r.Status != SessionOpOK {
		t.Fatal(r)
	}
	if _, err := s.Session(ctx, "sess"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// The session record has one set of names: the fields a turn or a session
// operation writes are teamster.SessionRecord's, and a session operation's
// body (bus.SessionOp) names its facts as the record does.
func TestTheSessionRecordHasOneSetOfNames(t *testing.T) {
	record := map[string]bool{}
	for _, f := range []string{teamster.SessionFieldSessionKey, teamster.SessionFieldSessionID,
		teamster.SessionFieldStorePath, teamster.SessionFieldAgentID, teamster.SessionFieldModelSelectionLocked,
		teamster.SessionFieldAgentHarnessID, teamster.SessionFieldOwnerPluginID, teamster.SessionFieldNativeBinding,
		teamster.SessionFieldNativeState, teamster.SessionFieldArchived, teamster.SessionFieldFence, teamster.SessionFieldUpdated} {
		record[f] = true
	}
	locked := true
	written := OwnerUpdate(teamster.SessionRecord{SessionKey: "k", NativeBinding: "{}"})
	maps.Copy(written, FieldsOf("k", "s", "/p", "a", "h", &locked))
	for f := range written {
		if !record[f] {
			t.Errorf("a write names field %q, which teamster.SessionRecord does not have", f)
		}
	}
	op := reflect.TypeFor[bus.SessionOp]()
	for i := range op.NumField() {
		name, _, _ := strings.Cut(op.Field(i).Tag.Get("json"), ",")
		if name != "v" && !record[name] {
			t.Errorf("bus.SessionOp field %q is not a session record field", name)
		}
	}
}
