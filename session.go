package teamster

import "time"

// The session record's field names: the fields of its Redis hash
// (teamster:{<sessionKey>}:session) and the JSON names of the same facts in
// prepared attempts and session operations.
const (
	SessionFieldSessionKey           = "sessionKey"
	SessionFieldSessionID            = "sessionId"
	SessionFieldStorePath            = "storePath"
	SessionFieldAgentID              = "agentId"
	SessionFieldModelSelectionLocked = "modelSelectionLocked"
	SessionFieldAgentHarnessID       = "agentHarnessId"
	SessionFieldOwnerPluginID        = "ownerPluginId"
	SessionFieldNativeBinding        = "nativeBinding"
	SessionFieldNativeState          = "nativeState"
	SessionFieldArchived             = "archived"
	SessionFieldFence                = "fence"
	SessionFieldUpdated              = "updated"
)

// SessionRecord is a session's stored record: what the owner's last
// successful plugin-harness turn pinned, and the harness's native binding.
//
// It is the record's one shape. leases reads it from the session hash (and
// writes it there, field by field, under the names above; booleans are
// stored as "true" or "false"), the delegated-execution check
// (delegation.Check) decides against it, and the router and the worker pass
// it between the two. Session operations (teamster.session.<op>) and
// prepared attempts carry some of its facts on the wire under the same
// names. Its JSON form (the operator CLI's) uses those names too, with the
// time of the last write as updatedAt (RFC 3339).
type SessionRecord struct {
	SessionKey           string `json:"sessionKey"`
	SessionID            string `json:"sessionId"`
	StorePath            string `json:"storePath"`
	AgentID              string `json:"agentId"`
	ModelSelectionLocked bool   `json:"modelSelectionLocked"`
	// AgentHarnessID is the harness the session is pinned to.
	AgentHarnessID string `json:"agentHarnessId"`
	// OwnerPluginID is the pinned harness's pluginId as the owner's turn
	// recorded it; empty when it recorded none.
	OwnerPluginID string `json:"ownerPluginId"`
	// NativeBinding is the harness's native session binding (opaque JSON).
	NativeBinding string `json:"nativeBinding"`
	// NativeState names the object in TEAMSTER_NATIVE_STATE that holds
	// what the harness needs on disk to resume NativeBinding on any worker
	// (bus.StateObjectName); empty when the harness keeps no such state.
	NativeState string `json:"nativeState"`
	// Archived is set by the owner's archive operation.
	Archived bool `json:"archived"`
	// Fence is the fence of the last write under a lease; Updated the time
	// of the last write.
	Fence   string    `json:"fence"`
	Updated time.Time `json:"updatedAt"`
}
