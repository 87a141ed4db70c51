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
// names.
type SessionRecord struct {
	SessionKey           string
	SessionID            string
	StorePath            string
	AgentID              string
	ModelSelectionLocked bool
	// AgentHarnessID is the harness the session is pinned to.
	AgentHarnessID string
	// OwnerPluginID is the pinned harness's pluginId as the owner's turn
	// recorded it; empty when it recorded none.
	OwnerPluginID string
	// NativeBinding is the harness's native session binding (opaque JSON).
	NativeBinding string
	// Archived is set by the owner's archive operation.
	Archived bool
	// Fence is the fence of the last write under a lease; Updated the time
	// of the last write.
	Fence   string
	Updated time.Time
}
