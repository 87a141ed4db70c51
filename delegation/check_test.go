package delegation

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/selection"
)

// verdict is what a case compares: the code ("" when allowed) and the field
// the refusal names.
type verdict struct {
	Code  teamster.Code
	Field string
}

type checkCase struct {
	rule     string // the rule of docs/PROTOCOL.md "Delegated execution" the case checks
	req      func(*Request)
	rec      func(*teamster.SessionRecord) *teamster.SessionRecord // returns the record to use (nil: missing)
	manifest func(*selection.Manifest)
	want     verdict
}

func allowed() verdict { return verdict{} }

func denied(field string) verdict {
	return verdict{Code: teamster.CodeDelegationDenied, Field: field}
}

func keep(r *teamster.SessionRecord) *teamster.SessionRecord { return r }

func checkCases() []checkCase {
	return []checkCase{
		// Allowed.
		{
			rule: "allowed: a voice-call delegate continues a codex-locked session with the exact stored facts",
			want: allowed(),
		},
		{
			rule: "allowed: a record without ownerPluginId needs no plugin match",
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.OwnerPluginID = ""; return r },
			want: allowed(),
		},
		{
			rule: "allowed: storePath empty on both sides is the exact stored value",
			req:  func(q *Request) { q.StorePath = "" },
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.StorePath = ""; return r },
			want: allowed(),
		},
		{
			rule:     "allowed: a harness without pluginId and a record without ownerPluginId",
			rec:      func(r *teamster.SessionRecord) *teamster.SessionRecord { r.OwnerPluginID = ""; return r },
			manifest: func(m *selection.Manifest) { m.PluginID = "" },
			want:     allowed(),
		},

		// Who is a delegate.
		{
			rule: "delegate: an empty delegate id is no delegate identity (invalid_request)",
			req:  func(q *Request) { q.Delegate = "" },
			want: verdict{Code: teamster.CodeInvalidRequest, Field: FieldDelegate},
		},
		{
			rule: "delegate: the owner plugin (the harness's pluginId) is never a delegate",
			req:  func(q *Request) { q.Delegate = fxOwner },
			want: denied(FieldDelegate),
		},
		{
			rule: "delegate: the owner is never a delegate even when its manifest lists itself",
			req:  func(q *Request) { q.Delegate = fxOwner },
			manifest: func(m *selection.Manifest) {
				m.DelegatedExecutionPluginIDs = append(m.DelegatedExecutionPluginIDs, fxOwner)
			},
			want: denied(FieldDelegate),
		},
		{
			rule: "delegate: the record's ownerPluginId is never a delegate, even listed and with a missing pin",
			req:  func(q *Request) { q.Delegate = "legacy-owner" },
			rec: func(r *teamster.SessionRecord) *teamster.SessionRecord {
				r.OwnerPluginID = "legacy-owner"
				r.AgentHarnessID = ""
				return r
			},
			manifest: func(m *selection.Manifest) { m.DelegatedExecutionPluginIDs = []string{"legacy-owner"} },
			want:     denied(FieldDelegate),
		},
		{
			rule:     "delegate: the harness's pluginId is the owner even when the record names no owner",
			req:      func(q *Request) { q.Delegate = fxOwner },
			rec:      func(r *teamster.SessionRecord) *teamster.SessionRecord { r.OwnerPluginID = ""; return r },
			manifest: func(m *selection.Manifest) { m.DelegatedExecutionPluginIDs = []string{fxOwner} },
			want:     denied(FieldDelegate),
		},

		// The stored record.
		{
			rule: "record: a session without a stored record cannot be delegated",
			rec:  func(*teamster.SessionRecord) *teamster.SessionRecord { return nil },
			want: denied(FieldRecord),
		},
		{
			rule: "record: a missing record is reported before anything the attempt gets wrong",
			req:  func(q *Request) { *q = Request{Delegate: fxDelegate} },
			rec:  func(*teamster.SessionRecord) *teamster.SessionRecord { return nil },
			want: denied(FieldRecord),
		},
		{
			rule: "record.agentHarnessId: a record that pins no harness",
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.AgentHarnessID = ""; return r },
			want: denied(FieldRecordAgentHarnessID),
		},
		{
			rule:     "record.agentHarnessId: a record pinned to the embedded runtime pins no plugin harness",
			req:      func(q *Request) { q.AgentHarnessID, q.AgentHarnessRuntimeOverride = "openclaw", "openclaw" },
			rec:      func(r *teamster.SessionRecord) *teamster.SessionRecord { r.AgentHarnessID = "openclaw"; return r },
			manifest: func(m *selection.Manifest) { m.ID = "openclaw" },
			want:     denied(FieldRecordAgentHarnessID),
		},
		{
			rule:     "manifest: the pinned harness is not registered (zero manifest)",
			manifest: func(m *selection.Manifest) { *m = selection.Manifest{} },
			want:     denied(FieldManifest),
		},
		{
			rule:     "manifest: the caller passed another harness's manifest, even one listing the delegate",
			manifest: func(m *selection.Manifest) { m.ID = "claude-cli" },
			want:     denied(FieldManifest),
		},
		{
			rule:     "delegatedExecutionPluginIds: the pinned harness does not list the delegate",
			manifest: func(m *selection.Manifest) { m.DelegatedExecutionPluginIDs = []string{"telephony-bridge"} },
			want:     denied(FieldDelegatedExecutionPluginIDs),
		},
		{
			rule:     "delegatedExecutionPluginIds: no list at all allows no delegate",
			manifest: func(m *selection.Manifest) { m.DelegatedExecutionPluginIDs = nil },
			want:     denied(FieldDelegatedExecutionPluginIDs),
		},
		{
			rule: "delegatedExecutionPluginIds: an unlisted delegate",
			req:  func(q *Request) { q.Delegate = "sms-relay" },
			want: denied(FieldDelegatedExecutionPluginIDs),
		},
		{
			rule: "delegatedExecutionPluginIds: plugin ids compare exactly (case)",
			req:  func(q *Request) { q.Delegate = "Voice-Call" },
			want: denied(FieldDelegatedExecutionPluginIDs),
		},
		{
			rule: "record.ownerPluginId: the recorded owner differs from the pinned harness's pluginId",
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.OwnerPluginID = "other-plugin"; return r },
			want: denied(FieldRecordOwnerPluginID),
		},
		{
			rule:     "record.ownerPluginId: a recorded owner and a harness without pluginId do not match",
			manifest: func(m *selection.Manifest) { m.PluginID = "" },
			want:     denied(FieldRecordOwnerPluginID),
		},
		{
			rule: "record.modelSelectionLocked: a session that is not model-selection locked",
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.ModelSelectionLocked = false; return r },
			want: denied(FieldRecordModelSelectionLocked),
		},
		{
			rule: "record.modelSelectionLocked: an unlocked record is refused even when the attempt claims the lock",
			req:  func(q *Request) { q.ModelSelectionLocked = true },
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.ModelSelectionLocked = false; return r },
			want: denied(FieldRecordModelSelectionLocked),
		},

		// The attempt against the record.
		{
			rule: "sessionKey: another session's key",
			req:  func(q *Request) { q.SessionKey = "agent:main:voice:+15550199" },
			want: denied(FieldSessionKey),
		},
		{
			rule: "sessionKey: no trimming (trailing space)",
			req:  func(q *Request) { q.SessionKey = fxSessionKey + " " },
			want: denied(FieldSessionKey),
		},
		{
			rule: "sessionKey: empty on both sides is not a stored key",
			req:  func(q *Request) { q.SessionKey = "" },
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.SessionKey = ""; return r },
			want: denied(FieldSessionKey),
		},
		{
			rule: "sessionId: another session id",
			req:  func(q *Request) { q.SessionID = "sess-00000000" },
			want: denied(FieldSessionID),
		},
		{
			rule: "sessionId: empty on both sides is not a stored id",
			req:  func(q *Request) { q.SessionID = "" },
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.SessionID = ""; return r },
			want: denied(FieldSessionID),
		},
		{
			rule: "storePath: another store path",
			req:  func(q *Request) { q.StorePath = "/srv/openclaw/agents/other/sessions.json" },
			want: denied(FieldStorePath),
		},
		{
			rule: "storePath: missing on the attempt while the record has one",
			req:  func(q *Request) { q.StorePath = "" },
			want: denied(FieldStorePath),
		},
		{
			rule: "storePath: present on the attempt while the record has none",
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.StorePath = ""; return r },
			want: denied(FieldStorePath),
		},
		{
			rule: "agentId: another agent",
			req:  func(q *Request) { q.AgentID = "agent-ops" },
			want: denied(FieldAgentID),
		},
		{
			rule: "agentId: case matters",
			req:  func(q *Request) { q.AgentID = "Agent-Main" },
			want: denied(FieldAgentID),
		},
		{
			rule: "agentId: empty on both sides is not a stored agent",
			req:  func(q *Request) { q.AgentID = "" },
			rec:  func(r *teamster.SessionRecord) *teamster.SessionRecord { r.AgentID = ""; return r },
			want: denied(FieldAgentID),
		},
		{
			rule: "modelSelectionLocked: the attempt does not carry modelSelectionLocked true",
			req:  func(q *Request) { q.ModelSelectionLocked = false },
			want: denied(FieldModelSelectionLocked),
		},
		{
			rule: "agentHarnessId: the attempt pins another harness",
			req:  func(q *Request) { q.AgentHarnessID = "claude-cli" },
			want: denied(FieldAgentHarnessID),
		},
		{
			rule: "agentHarnessId: the attempt pins no harness",
			req:  func(q *Request) { q.AgentHarnessID = "" },
			want: denied(FieldAgentHarnessID),
		},
		{
			rule: "agentHarnessRuntimeOverride: another harness",
			req:  func(q *Request) { q.AgentHarnessRuntimeOverride = "claude-cli" },
			want: denied(FieldAgentHarnessRuntimeOverride),
		},
		{
			rule: "agentHarnessRuntimeOverride: empty is not the pinned harness",
			req:  func(q *Request) { q.AgentHarnessRuntimeOverride = "" },
			want: denied(FieldAgentHarnessRuntimeOverride),
		},
		{
			rule: "agentHarnessRuntimeOverride: default is not the pinned harness",
			req:  func(q *Request) { q.AgentHarnessRuntimeOverride = "default" },
			want: denied(FieldAgentHarnessRuntimeOverride),
		},
		{
			rule: "agentHarnessRuntimeOverride: auto is not the pinned harness",
			req:  func(q *Request) { q.AgentHarnessRuntimeOverride = "auto" },
			want: denied(FieldAgentHarnessRuntimeOverride),
		},
		{
			rule: "agentHarnessId and override agreeing with each other but not with the pin",
			req:  func(q *Request) { q.AgentHarnessID, q.AgentHarnessRuntimeOverride = "claude-cli", "claude-cli" },
			want: denied(FieldAgentHarnessID),
		},
	}
}

// run builds a case's inputs from the allowed fixture and checks them.
func (c checkCase) run() (Request, *teamster.SessionRecord, selection.Manifest, error) {
	req, rec, m := fxRequest(), fxRecord(), fxManifest()
	if c.req != nil {
		c.req(&req)
	}
	if c.rec != nil {
		rec = c.rec(rec)
	}
	if c.manifest != nil {
		c.manifest(&m)
	}
	return req, rec, m, Check(req, rec, m)
}

func TestCheck(t *testing.T) {
	for _, c := range checkCases() {
		t.Run(c.rule, func(t *testing.T) {
			_, _, _, err := c.run()
			got := verdict{Code: teamster.CodeOf(err), Field: DeniedField(err)}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("verdict (-want +got):\n%s\nerror: %v", diff, err)
			}
			if err == nil {
				return
			}
			var te *teamster.Error
			if !errors.As(err, &te) {
				t.Fatalf("error %T is not a *teamster.Error", err)
			}
			switch c.want.Code {
			case teamster.CodeDelegationDenied:
				if !errors.Is(err, teamster.ErrDelegationDenied) {
					t.Errorf("errors.Is(err, ErrDelegationDenied) is false for %v", err)
				}
			case teamster.CodeInvalidRequest:
				if !errors.Is(err, teamster.ErrInvalidRequest) || errors.Is(err, teamster.ErrDelegationDenied) {
					t.Errorf("want invalid_request only, got %v", err)
				}
			}
		})
	}
}

// TestCheckMessagesLeakNoValue: no refusal message contains any value of its
// inputs (session keys, store paths, session, agent, harness and plugin ids).
func TestCheckMessagesLeakNoValue(t *testing.T) {
	for _, c := range checkCases() {
		req, rec, m, err := c.run()
		if err == nil {
			continue
		}
		msg := err.Error()
		for _, v := range values(req, rec, m) {
			if strings.Contains(msg, v) {
				t.Errorf("%s: message %q contains the value %q", c.rule, msg, v)
			}
		}
	}
}

// TestCheckOrder starts from inputs where every check fails and repairs one
// fact at a time, in the documented order: each step must name the next field.
func TestCheckOrder(t *testing.T) {
	req := Request{Delegate: "", SessionKey: "wrong-key", SessionID: "wrong-id", StorePath: "/wrong",
		AgentID: "wrong-agent", AgentHarnessID: "wrong-harness", AgentHarnessRuntimeOverride: "wrong-harness"}
	var rec *teamster.SessionRecord
	m := selection.Manifest{ID: "wrong-harness", PluginID: fxOwner}

	steps := []struct {
		want   verdict
		repair func()
	}{
		{verdict{teamster.CodeInvalidRequest, FieldDelegate}, func() { req.Delegate = "legacy-owner" }},
		{denied(FieldRecord), func() {
			rec = &teamster.SessionRecord{SessionKey: fxSessionKey, SessionID: fxSessionID, StorePath: fxStorePath,
				AgentID: fxAgentID, OwnerPluginID: "legacy-owner"}
		}},
		{denied(FieldDelegate), func() { req.Delegate = fxOwner; rec.OwnerPluginID = "other-plugin" }},
		{denied(FieldRecordAgentHarnessID), func() { rec.AgentHarnessID = fxHarness }},
		{denied(FieldManifest), func() { m.ID = fxHarness }},
		{denied(FieldDelegate), func() { req.Delegate = fxDelegate }},
		{denied(FieldDelegatedExecutionPluginIDs), func() { m.DelegatedExecutionPluginIDs = []string{fxDelegate} }},
		{denied(FieldRecordOwnerPluginID), func() { rec.OwnerPluginID = fxOwner }},
		{denied(FieldRecordModelSelectionLocked), func() { rec.ModelSelectionLocked = true }},
		{denied(FieldSessionKey), func() { req.SessionKey = fxSessionKey }},
		{denied(FieldSessionID), func() { req.SessionID = fxSessionID }},
		{denied(FieldStorePath), func() { req.StorePath = fxStorePath }},
		{denied(FieldAgentID), func() { req.AgentID = fxAgentID }},
		{denied(FieldModelSelectionLocked), func() { req.ModelSelectionLocked = true }},
		{denied(FieldAgentHarnessID), func() { req.AgentHarnessID = fxHarness }},
		{denied(FieldAgentHarnessRuntimeOverride), func() { req.AgentHarnessRuntimeOverride = fxHarness }},
		{allowed(), nil},
	}
	for i, s := range steps {
		err := Check(req, rec, m)
		got := verdict{Code: teamster.CodeOf(err), Field: DeniedField(err)}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Fatalf("step %d (-want +got):\n%s\nerror: %v", i, diff, err)
		}
		if s.repair != nil {
			s.repair()
		}
	}
}

func TestCheckDoesNotModifyInputs(t *testing.T) {
	req, rec, m := fxRequest(), fxRecord(), fxManifest()
	req.Delegate = "sms-relay"
	wantReq, wantRec, wantM := req, *rec, fxManifest()
	_ = Check(req, rec, m)
	if diff := cmp.Diff(wantReq, req); diff != "" {
		t.Errorf("request changed:\n%s", diff)
	}
	if diff := cmp.Diff(wantRec, *rec); diff != "" {
		t.Errorf("record changed:\n%s", diff)
	}
	if diff := cmp.Diff(wantM, m); diff != "" {
		t.Errorf("manifest changed:\n%s", diff)
	}
}

func TestDeniedField(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"not a teamster error", errors.New("field sessionKey is wrong"), ""},
		{"no field in the message", teamster.Errorf(teamster.CodeDelegationDenied, "nope"), ""},
		{"empty message", &teamster.Error{Code: teamster.CodeDelegationDenied}, ""},
		{"field then space", teamster.Errorf(teamster.CodeDelegationDenied, "field storePath is not it"), "storePath"},
		{"field then colon", teamster.Errorf(teamster.CodeInvalidRequest, "field v: version 2"), "v"},
		{"wrapped", wrap(teamster.Errorf(teamster.CodeDelegationDenied, "field agentId is wrong")), "agentId"},
	}
	for _, c := range cases {
		if got := DeniedField(c.err); got != c.want {
			t.Errorf("%s: DeniedField = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestDeniedFieldSurvivesTheWire: a refusal that went through a reply's JSON
// still names its field.
func TestDeniedFieldSurvivesTheWire(t *testing.T) {
	req := fxRequest()
	req.StorePath = "/elsewhere"
	err := Check(req, fxRecord(), fxManifest())
	b, jerr := json.Marshal(err)
	if jerr != nil {
		t.Fatal(jerr)
	}
	var decoded teamster.Error
	if jerr := json.Unmarshal(b, &decoded); jerr != nil {
		t.Fatal(jerr)
	}
	if got := DeniedField(&decoded); got != FieldStorePath {
		t.Fatalf("decoded %s: DeniedField = %q, want %q", b, got, FieldStorePath)
	}
	if !errors.Is(&decoded, teamster.ErrDelegationDenied) {
		t.Fatalf("decoded %s is not delegation_denied", b)
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "router: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func wrap(err error) error { return wrapped{err} }
