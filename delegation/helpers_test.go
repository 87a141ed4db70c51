package delegation

import (
	"slices"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/selection"
)

// The allowed fixture: the voice-call plugin continuing a session that the
// Codex harness owns and has locked. Values look like real, private ones
// (a session key with a phone number, an absolute store path), so that the
// no-leak test means something.
const (
	fxSessionKey = "agent:main:voice:+15550100"
	fxSessionID  = "sess-7f3a91c2"
	fxStorePath  = "/srv/openclaw/agents/main/sessions.json"
	fxAgentID    = "agent-main"
	fxHarness    = "codex"
	fxOwner      = "codex-plugin"
	fxDelegate   = "voice-call"
)

func fxManifest() selection.Manifest {
	return selection.Manifest{ID: fxHarness, Label: "Codex", PluginID: fxOwner,
		DelegatedExecutionPluginIDs: []string{"telephony-bridge", fxDelegate}}
}

func fxRecord() *teamster.SessionRecord {
	return &teamster.SessionRecord{SessionKey: fxSessionKey, SessionID: fxSessionID, StorePath: fxStorePath,
		AgentID: fxAgentID, ModelSelectionLocked: true, AgentHarnessID: fxHarness, OwnerPluginID: fxOwner}
}

func fxRequest() Request {
	return Request{Delegate: fxDelegate, SessionKey: fxSessionKey, SessionID: fxSessionID,
		StorePath: fxStorePath, AgentID: fxAgentID, ModelSelectionLocked: true,
		AgentHarnessID: fxHarness, AgentHarnessRuntimeOverride: fxHarness}
}

// values lists every non-empty string of a check's inputs: none of them may
// appear in an error message.
func values(req Request, rec *teamster.SessionRecord, m selection.Manifest) []string {
	vs := []string{req.Delegate, req.SessionKey, req.SessionID, req.StorePath, req.AgentID,
		req.AgentHarnessID, req.AgentHarnessRuntimeOverride, m.ID, m.Label, m.PluginID}
	vs = append(vs, m.DelegatedExecutionPluginIDs...)
	if rec != nil {
		vs = append(vs, rec.SessionKey, rec.SessionID, rec.StorePath, rec.AgentID,
			rec.AgentHarnessID, rec.OwnerPluginID)
	}
	return slices.DeleteFunc(vs, func(s string) bool { return s == "" })
}
