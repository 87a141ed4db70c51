package delegation

import (
	"slices"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/selection"
	"pgregory.net/rapid"
)

// Generated values carry prefixes no refusal message contains, so that a
// message echoing any of them would be caught.
func genID(prefix string) *rapid.Generator[string] {
	return rapid.Map(rapid.StringMatching(`[a-z0-9][a-z0-9_-]{0,10}`), func(s string) string { return prefix + s })
}

// base is an allowed delegation: a record, the pinned harness's manifest and
// a request that passes Check.
type base struct {
	req Request
	rec teamster.SessionRecord
	m   selection.Manifest
}

func genBase() *rapid.Generator[base] {
	return rapid.Custom(func(t *rapid.T) base {
		harness := genID("hrn-").Draw(t, "harness")
		delegate := genID("dlg-").Draw(t, "delegate")
		others := rapid.SliceOfNDistinct(genID("oth-"), 0, 3, rapid.ID[string]).Draw(t, "otherDelegates")
		list := rapid.Permutation(append(others, delegate)).Draw(t, "delegatedExecutionPluginIds")
		m := selection.Manifest{ID: harness, DelegatedExecutionPluginIDs: list}
		if rapid.Bool().Draw(t, "hasPluginId") {
			m.PluginID = genID("plg-").Draw(t, "pluginId")
		}
		rec := teamster.SessionRecord{
			SessionKey:           "sk:" + rapid.StringMatching(`[A-Za-z0-9:+._/ -]{1,40}`).Draw(t, "sessionKey"),
			SessionID:            genID("sid-").Draw(t, "sessionId"),
			AgentID:              genID("agt-").Draw(t, "agentId"),
			ModelSelectionLocked: true,
			AgentHarnessID:       harness,
		}
		if rapid.Bool().Draw(t, "hasStorePath") {
			rec.StorePath = "/store/" + rapid.StringMatching(`[a-z0-9/._-]{1,30}`).Draw(t, "storePath")
		}
		if m.PluginID != "" && rapid.Bool().Draw(t, "recordsOwner") {
			rec.OwnerPluginID = m.PluginID
		}
		req := Request{Delegate: delegate, SessionKey: rec.SessionKey, SessionID: rec.SessionID,
			StorePath: rec.StorePath, AgentID: rec.AgentID, ModelSelectionLocked: true,
			AgentHarnessID: harness, AgentHarnessRuntimeOverride: harness}
		return base{req: req, rec: rec, m: m}
	})
}

// genOther draws a string that differs from old: empty, old with a suffix,
// old in upper case, or a fresh value with the same prefix. Every non-empty
// candidate carries the prefix (old does), so the no-leak check stays
// meaningful.
func genOther(t *rapid.T, label, old, prefix string) string {
	stem := old
	if stem == "" {
		stem = prefix
	}
	candidates := []string{"", stem + "x", strings.ToUpper(stem), stem + " ", prefix + rapid.StringMatching(`[a-z0-9]{1,8}`).Draw(t, label+"Fresh")}
	candidates = slices.DeleteFunc(candidates, func(s string) bool { return s == old })
	return rapid.SampledFrom(candidates).Draw(t, label)
}

// verdictOf is the verdict of one check, after asserting the error's shape
// and that its message carries none of the inputs' values.
func verdictOf(t *rapid.T, req Request, rec *teamster.SessionRecord, m selection.Manifest) verdict {
	err := Check(req, rec, m)
	if err != nil {
		if _, ok := err.(*teamster.Error); !ok {
			t.Fatalf("error %T is not a *teamster.Error", err)
		}
		for _, v := range values(req, rec, m) {
			if strings.Contains(err.Error(), v) {
				t.Fatalf("message %q contains the value %q", err.Error(), v)
			}
		}
	}
	return verdict{Code: teamster.CodeOf(err), Field: DeniedField(err)}
}

func TestPropertyBaseIsAllowed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBase().Draw(t, "base")
		if got := verdictOf(t, b.req, &b.rec, b.m); got != allowed() {
			t.Fatalf("generated base is refused: %+v", got)
		}
	})
}

// TestPropertyRequestMutationNamesThatField: changing any one session fact of
// an allowed request is denied, naming exactly that field.
func TestPropertyRequestMutationNamesThatField(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBase().Draw(t, "base")
		req := b.req
		field := rapid.SampledFrom([]string{FieldSessionKey, FieldSessionID, FieldStorePath, FieldAgentID,
			FieldModelSelectionLocked, FieldAgentHarnessID, FieldAgentHarnessRuntimeOverride}).Draw(t, "field")
		switch field {
		case FieldSessionKey:
			req.SessionKey = genOther(t, "sessionKey", req.SessionKey, "sk:")
		case FieldSessionID:
			req.SessionID = genOther(t, "sessionId", req.SessionID, "sid-")
		case FieldStorePath:
			req.StorePath = genOther(t, "storePath", req.StorePath, "/store/")
		case FieldAgentID:
			req.AgentID = genOther(t, "agentId", req.AgentID, "agt-")
		case FieldModelSelectionLocked:
			req.ModelSelectionLocked = false
		case FieldAgentHarnessID:
			req.AgentHarnessID = rapid.SampledFrom([]string{genOther(t, "agentHarnessId", req.AgentHarnessID, "hrn-"),
				selection.RuntimeAuto, selection.RuntimeDefault, selection.RuntimeOpenClaw}).Draw(t, "agentHarnessIdValue")
		case FieldAgentHarnessRuntimeOverride:
			req.AgentHarnessRuntimeOverride = rapid.SampledFrom([]string{genOther(t, "override", req.AgentHarnessRuntimeOverride, "hrn-"),
				selection.RuntimeAuto, selection.RuntimeDefault, selection.RuntimeOpenClaw}).Draw(t, "overrideValue")
		}
		if got, want := verdictOf(t, req, &b.rec, b.m), denied(field); got != want {
			t.Fatalf("mutating %s: got %+v, want %+v", field, got, want)
		}
	})
}

// TestPropertyDelegateMutation: an allowed request with another delegate id
// is refused: empty (invalid_request), the owner (delegate), or unlisted
// (delegatedExecutionPluginIds).
func TestPropertyDelegateMutation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBase().Draw(t, "base")
		req := b.req
		var want verdict
		switch kind := rapid.SampledFrom([]string{"empty", "owner", "unlisted"}).Draw(t, "kind"); kind {
		case "empty":
			req.Delegate = ""
			want = verdict{Code: teamster.CodeInvalidRequest, Field: FieldDelegate}
		case "owner":
			if b.m.PluginID == "" {
				t.Skip("the harness has no owner plugin id")
			}
			req.Delegate = b.m.PluginID
			want = denied(FieldDelegate)
		case "unlisted":
			req.Delegate = genOther(t, "delegate", req.Delegate, "dlg-")
			if req.Delegate == "" || b.m.AllowsDelegate(req.Delegate) {
				t.Skip("not an unlisted delegate")
			}
			want = denied(FieldDelegatedExecutionPluginIDs)
		}
		if got := verdictOf(t, req, &b.rec, b.m); got != want {
			t.Fatalf("delegate mutated: got %+v, want %+v", got, want)
		}
	})
}

// TestPropertyRecordAndManifestMutation: changing one fact of the stored
// record or of the pinned manifest is refused, naming the documented field
// (a fact the attempt must match is named by the attempt's field).
func TestPropertyRecordAndManifestMutation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBase().Draw(t, "base")
		rec, m := b.rec, b.m
		m.DelegatedExecutionPluginIDs = slices.Clone(m.DelegatedExecutionPluginIDs)
		var want verdict
		switch what := rapid.SampledFrom([]string{"missing", "record.sessionKey", "record.sessionId",
			"record.storePath", "record.agentId", "record.modelSelectionLocked", "record.agentHarnessId",
			"record.ownerPluginId", "manifest.id", "manifest.delegatedExecutionPluginIds", "manifest.pluginId"}).Draw(t, "what"); what {
		case "missing":
			if got, want := verdictOf(t, b.req, nil, m), denied(FieldRecord); got != want {
				t.Fatalf("missing record: got %+v, want %+v", got, want)
			}
			return
		case "record.sessionKey":
			rec.SessionKey = genOther(t, "v", rec.SessionKey, "sk:")
			want = denied(FieldSessionKey)
		case "record.sessionId":
			rec.SessionID = genOther(t, "v", rec.SessionID, "sid-")
			want = denied(FieldSessionID)
		case "record.storePath":
			rec.StorePath = genOther(t, "v", rec.StorePath, "/store/")
			want = denied(FieldStorePath)
		case "record.agentId":
			rec.AgentID = genOther(t, "v", rec.AgentID, "agt-")
			want = denied(FieldAgentID)
		case "record.modelSelectionLocked":
			rec.ModelSelectionLocked = false
			want = denied(FieldRecordModelSelectionLocked)
		case "record.agentHarnessId":
			rec.AgentHarnessID = rapid.SampledFrom([]string{"", selection.RuntimeAuto, selection.RuntimeDefault,
				selection.RuntimeOpenClaw, genOther(t, "v", rec.AgentHarnessID, "hrn-")}).Draw(t, "pin")
			want = denied(FieldManifest)
			if !pinsHarnessOracle(rec.AgentHarnessID) {
				want = denied(FieldRecordAgentHarnessID)
			}
		case "record.ownerPluginId":
			rec.OwnerPluginID = genOther(t, "v", rec.OwnerPluginID, "plg-")
			switch {
			case rec.OwnerPluginID == "":
				want = allowed() // no recorded owner: nothing to match
			default:
				want = denied(FieldRecordOwnerPluginID)
			}
		case "manifest.id":
			m.ID = genOther(t, "v", m.ID, "hrn-")
			want = denied(FieldManifest)
		case "manifest.delegatedExecutionPluginIds":
			m.DelegatedExecutionPluginIDs = slices.DeleteFunc(m.DelegatedExecutionPluginIDs,
				func(s string) bool { return s == b.req.Delegate })
			want = denied(FieldDelegatedExecutionPluginIDs)
		case "manifest.pluginId":
			m.PluginID = genOther(t, "v", m.PluginID, "plg-")
			want = allowed() // no recorded owner: the harness's plugin id is not compared
			if rec.OwnerPluginID != "" {
				want = denied(FieldRecordOwnerPluginID)
			}
		}
		if got := verdictOf(t, b.req, &rec, m); got != want {
			t.Fatalf("got %+v, want %+v (record %+v, manifest %+v)", got, want, rec, m)
		}
	})
}

// pinsHarnessOracle restates which pins name a plugin harness, independently
// of pinsHarness.
func pinsHarnessOracle(id string) bool {
	return id != "" && !slices.Contains([]string{"auto", "default", "openclaw"}, id)
}
