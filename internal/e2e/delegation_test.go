package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/delegation"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
)

// ownerAttempt is the owner's turn of a codex-locked session.
func ownerAttempt(session, prompt string) *bus.Attempt {
	a := fleettest.Attempt(session, prompt)
	a.AgentHarnessID = "codex"
	a.ModelSelectionLocked = true
	return a
}

// delegateAttempt is voice-call's continuation: the exact stored facts.
func delegateAttempt(session, prompt string) *bus.Attempt {
	a := ownerAttempt(session, prompt)
	a.AgentHarnessRuntimeOverride = "codex"
	return a
}

func binding(t *testing.T, r *bus.Result) (thread string, turns int) {
	t.Helper()
	var b struct {
		Thread string `json:"thread"`
		Turns  int    `json:"turns"`
	}
	if err := json.Unmarshal(r.NativeSession, &b); err != nil {
		t.Fatalf("native session %s: %v", r.NativeSession, err)
	}
	return b.Thread, b.Turns
}

// voice-call continues a codex-locked session; its turn runs in order with
// the owner's, writes only the native binding, and every bad variant of its
// request is refused at submit with the field named, running nothing.
func TestDelegateContinuesALockedSession(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	const s = "agent:main:voice:carol"
	if r := result(t, submit(t, f, ownerAttempt(s, "owner turn 1"))); r.Status != teamster.StatusOK {
		t.Fatalf("owner turn 1: %+v", r)
	}
	rec, err := leases.NewStore(f.RDB).Session(t.Context(), s)
	if err != nil || !rec.ModelSelectionLocked || rec.AgentHarnessID != "codex" || rec.OwnerPluginID != "codex" {
		t.Fatalf("record after the owner's turn: %+v (%v)", rec, err)
	}

	o2 := submit(t, f, ownerAttempt(s, fleettest.Script(`{"sleep":300}`, `{"say":"owner turn 2"}`)))
	d, err := f.Client.SubmitAsDelegate(t.Context(), "voice-call", delegateAttempt(s, "voice turn"))
	if err != nil || d.Reply.Status != bus.StatusAccepted {
		t.Fatalf("delegate submit: %v %+v", err, d)
	}
	o4 := submit(t, f, ownerAttempt(s, "owner turn 4"))
	var last int
	r2, rd, r4 := result(t, o2), result(t, d), result(t, o4)
	for _, r := range []*bus.Result{r2, rd, r4} {
		if r.Status != teamster.StatusOK {
			t.Fatalf("result %+v", r)
		}
		_, turns := binding(t, r)
		if turns <= last {
			t.Fatalf("native turns %d after %d: the turns did not run in order", turns, last)
		}
		last = turns
	}
	entries := f.Ledger.Entries()
	if err := scripted.CheckLedger(entries); err != nil {
		t.Fatal(err)
	}
	checkRunOrder(t, entries, map[string][]string{s: {entries[0].Attempt, o2.AttemptID(), d.AttemptID(), o4.AttemptID()}})
	for _, e := range entries {
		if e.Attempt == d.AttemptID() && e.Delegate != "voice-call" {
			t.Fatalf("the delegate's run was not marked as voice-call's: %+v", e)
		}
	}

	// Every bad variant is refused at submit, naming the field; nothing runs.
	js, _ := jetstream.New(f.Connect("inspect"))
	stream, _ := js.Stream(t.Context(), bus.StreamAttempts)
	// A session whose owner ran without locking the model selection.
	unlocked := "agent:main:voice:unlocked"
	ua := ownerAttempt(unlocked, "owner, unlocked")
	ua.ModelSelectionLocked = false
	result(t, submit(t, f, ua))
	ran := len(f.Ledger.Entries())
	before, _ := stream.Info(t.Context())
	cases := []struct {
		name, delegate string
		mutate         func(a *bus.Attempt)
		field          string
	}{
		{"unlisted delegate", "sms-bridge", nil, delegation.FieldDelegatedExecutionPluginIDs},
		{"the owner's own plugin", "codex", nil, delegation.FieldDelegate},
		{"record not locked", "voice-call", func(a *bus.Attempt) {
			a.SessionKey, a.SessionID, a.StorePath = unlocked, "sid-"+unlocked, "/var/openclaw/"+unlocked
		}, delegation.FieldRecordModelSelectionLocked},
		{"wrong sessionId", "voice-call", func(a *bus.Attempt) { a.SessionID = "another" }, delegation.FieldSessionID},
		{"wrong storePath", "voice-call", func(a *bus.Attempt) { a.StorePath = "/elsewhere" }, delegation.FieldStorePath},
		{"wrong agentId", "voice-call", func(a *bus.Attempt) { a.AgentID = "other-agent" }, delegation.FieldAgentID},
		{"modelSelectionLocked false", "voice-call", func(a *bus.Attempt) { a.ModelSelectionLocked = false }, delegation.FieldModelSelectionLocked},
		{"agentHarnessId not the pin", "voice-call", func(a *bus.Attempt) { a.AgentHarnessID = "claude-cli" }, delegation.FieldAgentHarnessID},
		{"agentHarnessRuntimeOverride not the pin", "voice-call", func(a *bus.Attempt) { a.AgentHarnessRuntimeOverride = "" }, delegation.FieldAgentHarnessRuntimeOverride},
		{"missing record", "voice-call", func(a *bus.Attempt) { a.SessionKey = "agent:main:voice:nobody" }, delegation.FieldRecord},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := delegateAttempt(s, "should not run")
			if c.mutate != nil {
				c.mutate(a)
			}
			h, err := f.Client.SubmitAsDelegate(t.Context(), c.delegate, a)
			var rejected *client.RejectedError
			if !errors.Is(err, teamster.ErrDelegationDenied) || h != nil || !errors.As(err, &rejected) || rejected.Reply.Status != bus.StatusRejected {
				t.Fatalf("%s: %v, want delegation_denied", c.name, err)
			}
			if got := delegation.DeniedField(err); got != c.field {
				t.Fatalf("%s: refusal names %q, want %q (%v)", c.name, got, c.field, err)
			}
		})
	}
	after, _ := stream.Info(t.Context())
	if after.State.LastSeq != before.State.LastSeq {
		t.Fatalf("refused delegate submits published %d attempts", after.State.LastSeq-before.State.LastSeq)
	}
	if len(f.Ledger.Entries()) != ran {
		t.Fatal("a refused delegate attempt ran")
	}
}

// The worker's check under the lease is authoritative: the owner resets the
// session after the delegate's submit was accepted and before it is claimed;
// the worker refuses the attempt with delegation_denied and the harness never
// sees it.
func TestDelegateRefusedUnderTheLeaseAfterAReset(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1, Slots: 1})
	const s = "agent:main:voice:dan"
	result(t, submit(t, f, ownerAttempt(s, "owner turn")))
	// Occupy the only slot with another session's turn, so the delegate's
	// attempt waits unclaimed.
	blocker := submit(t, f, fleettest.Attempt("blocker", fleettest.Script(`{"sleep":60000}`)))
	waitEvent(t, blocker, bus.EventClaimed)
	d, err := f.Client.SubmitAsDelegate(t.Context(), "voice-call", delegateAttempt(s, "voice turn"))
	if err != nil {
		t.Fatalf("delegate submit: %v", err)
	}
	if err := f.Client.SessionOp(t.Context(), leases.OpReset, bus.SessionOp{SessionKey: s, SessionID: "sid-after-reset"}); err != nil {
		t.Fatalf("owner reset: %v", err)
	}
	if err := f.Client.Cancel(t.Context(), blocker.AttemptID(), "free the slot"); err != nil {
		t.Fatal(err)
	}
	r := result(t, d)
	if r.Error == nil || r.Error.Code != teamster.CodeDelegationDenied || r.Error.SideEffects != teamster.SideEffectsNone {
		t.Fatalf("delegate attempt after the reset: %+v, want delegation_denied with no side effects", r)
	}
	for _, e := range f.Ledger.Entries() {
		if e.Attempt == d.AttemptID() {
			t.Fatal("the harness saw the refused delegate attempt")
		}
	}
}

// Session operations are the owner's: a delegate's reset, patch, delete or
// archive is owner_only and changes nothing; reset during a turn is
// session_busy; reset between turns clears the binding and the next turn
// starts a fresh native session.
func TestSessionOperations(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	const s = "agent:main:ops:erin"
	store := leases.NewStore(f.RDB)
	result(t, submit(t, f, ownerAttempt(s, "turn 1")))
	r2 := result(t, submit(t, f, ownerAttempt(s, "turn 2")))
	if _, turns := binding(t, r2); turns != 2 {
		t.Fatalf("native turns %d, want 2", turns)
	}
	before, err := store.Session(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{leases.OpReset, leases.OpPatch, leases.OpDelete, leases.OpArchive} {
		err := f.Client.SessionOpAsDelegate(t.Context(), "voice-call", op, bus.SessionOp{SessionKey: s, SessionID: "hijacked"})
		if !errors.Is(err, teamster.ErrOwnerOnly) {
			t.Fatalf("delegate %s: %v, want owner_only", op, err)
		}
	}
	// A delegate key in the body is refused the same way.
	msg, err := f.Connect("raw").Request("teamster.session.reset", []byte(fmt.Sprintf(`{"v":1,"sessionKey":%q,"delegate":"voice-call"}`, s)), waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var rep bus.Reply
	if err := bus.Decode(msg.Data, &rep); err != nil || !errors.Is(rep.Err(), teamster.ErrOwnerOnly) {
		t.Fatalf("body-declared delegate: %+v %v", rep, err)
	}
	after, err := store.Session(t.Context(), s)
	if err != nil || *after != *before {
		t.Fatalf("a refused op changed the record:\n before %+v\n after  %+v", before, after)
	}

	running := submit(t, f, ownerAttempt(s, fleettest.Script(`{"sleep":60000}`)))
	waitLedger(t, f, running.AttemptID(), scripted.EventStart)
	if err := f.Client.SessionOp(t.Context(), leases.OpReset, bus.SessionOp{SessionKey: s}); !errors.Is(err, teamster.ErrSessionBusy) {
		t.Fatalf("reset during a turn: %v, want session_busy", err)
	}
	if err := f.Client.Cancel(t.Context(), running.AttemptID(), ""); err != nil {
		t.Fatal(err)
	}
	result(t, running)

	if err := f.Client.SessionOp(t.Context(), leases.OpReset, bus.SessionOp{SessionKey: s, SessionID: "sid-fresh"}); err != nil {
		t.Fatalf("reset between turns: %v", err)
	}
	rec, _ := store.Session(t.Context(), s)
	if rec.NativeBinding != "" || rec.SessionID != "sid-fresh" {
		t.Fatalf("record after reset %+v", rec)
	}
	next := ownerAttempt(s, "after the reset")
	next.SessionID = "sid-fresh"
	r := result(t, submit(t, f, next))
	if _, turns := binding(t, r); turns != 1 {
		t.Fatalf("native turns after reset %d, want a fresh session (1)", turns)
	}
	if err := f.Client.SessionOp(t.Context(), leases.OpDelete, bus.SessionOp{SessionKey: s}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Session(t.Context(), s); !errors.Is(err, leases.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}
