package delegation

import (
	"errors"
	"strings"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/selection"
)

// The fields a refusal names (see the package documentation for the order in
// which Check tests them). Attempt fields carry their wire names; facts of the
// stored session record alone carry the prefix "record.".
const (
	FieldDelegate                    = "delegate"
	FieldRecord                      = "record"
	FieldRecordAgentHarnessID        = "record.agentHarnessId"
	FieldManifest                    = "manifest"
	FieldDelegatedExecutionPluginIDs = "delegatedExecutionPluginIds"
	FieldRecordOwnerPluginID         = "record.ownerPluginId"
	FieldRecordModelSelectionLocked  = "record.modelSelectionLocked"
	FieldSessionKey                  = "sessionKey"
	FieldSessionID                   = "sessionId"
	FieldStorePath                   = "storePath"
	FieldAgentID                     = "agentId"
	FieldModelSelectionLocked        = "modelSelectionLocked"
	FieldAgentHarnessID              = "agentHarnessId"
	FieldAgentHarnessRuntimeOverride = "agentHarnessRuntimeOverride"
)

// Request is what a delegate asks to run: its identity and the session facts
// of its prepared attempt (bus.Attempt's fields of the same names).
type Request struct {
	// Delegate is the delegate's plugin id: the <pluginId> of
	// teamster.submit.delegate.<pluginId>, or the Teamster-Delegate header.
	Delegate                    string
	SessionKey                  string
	SessionID                   string
	StorePath                   string
	AgentID                     string
	ModelSelectionLocked        bool
	AgentHarnessID              string
	AgentHarnessRuntimeOverride string
}

// Check decides whether req's delegate may run its attempt against the
// session's stored record rec (nil when the session has none). pinned is the
// manifest of the harness rec pins (rec.AgentHarnessID), as the registry
// advertises it, or the zero Manifest when no live worker registers it.
//
// It returns nil to allow. Otherwise it returns a *teamster.Error: code
// invalid_request for an empty delegate id, delegation_denied for every other
// refusal, naming the first failing field in the documented order (see
// DeniedField) and no value.
func Check(req Request, rec *teamster.SessionRecord, pinned selection.Manifest) error {
	switch {
	case req.Delegate == "":
		return teamster.Errorf(teamster.CodeInvalidRequest,
			"field %s is empty: there is no delegate identity; owners submit on teamster.submit", FieldDelegate)
	case rec == nil:
		return deny(FieldRecord, "is missing: a delegate can only continue a session that has a stored record")
	case rec.OwnerPluginID != "" && req.Delegate == rec.OwnerPluginID:
		return deny(FieldDelegate, "is the session's owner plugin: an owner is never a delegate and submits on teamster.submit")
	case !pinsHarness(rec.AgentHarnessID):
		return deny(FieldRecordAgentHarnessID, "pins no plugin harness")
	case pinned.ID != rec.AgentHarnessID:
		return deny(FieldManifest, "of the pinned harness is not known")
	case pinned.PluginID != "" && req.Delegate == pinned.PluginID:
		return deny(FieldDelegate, "is the pinned harness's own plugin: an owner is never a delegate and submits on teamster.submit")
	case !pinned.AllowsDelegate(req.Delegate):
		return deny(FieldDelegatedExecutionPluginIDs, "of the pinned harness does not list the delegate")
	case rec.OwnerPluginID != "" && rec.OwnerPluginID != pinned.PluginID:
		return deny(FieldRecordOwnerPluginID, "is not the pinned harness's pluginId")
	case !rec.ModelSelectionLocked:
		return deny(FieldRecordModelSelectionLocked, "is not true: only a model-selection-locked session can be delegated")
	case req.SessionKey == "" || req.SessionKey != rec.SessionKey:
		return deny(FieldSessionKey, notStored)
	case req.SessionID == "" || req.SessionID != rec.SessionID:
		return deny(FieldSessionID, notStored)
	case req.StorePath != rec.StorePath:
		return deny(FieldStorePath, notStored)
	case req.AgentID == "" || req.AgentID != rec.AgentID:
		return deny(FieldAgentID, notStored)
	case !req.ModelSelectionLocked:
		return deny(FieldModelSelectionLocked, "is not true: a delegate's attempt must keep the session's model selection locked")
	case req.AgentHarnessID != rec.AgentHarnessID:
		return deny(FieldAgentHarnessID, notPinned)
	case req.AgentHarnessRuntimeOverride != rec.AgentHarnessID:
		return deny(FieldAgentHarnessRuntimeOverride, notPinned)
	}
	return nil
}

const (
	notStored = "is not the session's exact stored value"
	notPinned = "is not the session's pinned harness"
)

// pinsHarness reports whether a record's agentHarnessId names a plugin
// harness: not empty and not one of the runtime ids that are no harness.
func pinsHarness(id string) bool {
	switch id {
	case "", selection.RuntimeAuto, selection.RuntimeOpenClaw, selection.RuntimeDefault:
		return false
	}
	return true
}

func deny(field, reason string) *teamster.Error {
	return teamster.Errorf(teamster.CodeDelegationDenied, "field %s %s", field, reason)
}

// DeniedField returns the field a refusal names: the <name> of a message
// "field <name> ..." carried by a *teamster.Error in err's chain. It works on
// errors decoded from a reply too, since it reads only the message. It
// returns "" for nil, for an error that is not a *teamster.Error and for a
// message that names no field.
func DeniedField(err error) string {
	var e *teamster.Error
	if !errors.As(err, &e) || e == nil {
		return ""
	}
	rest, ok := strings.CutPrefix(e.Message, "field ")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, " :"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
