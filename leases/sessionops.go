package leases

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/teamster-fleet/teamster"
)

// Owner-only session operations (teamster.session.<op>).
const (
	OpCreate  = "create"
	OpPatch   = "patch"
	OpReset   = "reset"
	OpDelete  = "delete"
	OpArchive = "archive"
)

// sessionOpScript applies an owner's session operation, refusing while a
// turn of the session runs (its lease is held).
//
// KEYS[1] teamster:{s}:lease
// KEYS[2] teamster:{s}:session
// ARGV[1] op: create, patch, reset, delete or archive
// ARGV[2..] field, value pairs to write (create, patch, reset); an empty value
// deletes the field
// Returns {status, previous nativeBinding, pinned agentHarnessId, previous
// nativeState}; status is
// "ok", "busy" (a turn runs), "exists" (create of an existing record) or
// "missing" (patch, reset, delete or archive of no record).
//
// reset clears the native binding and the model-selection lock (the lock
// belongs to the native session that was reset; the owner's next successful
// turn sets it again), then writes the given fields (a new sessionId, ...).
// delete removes the record. archive marks it archived and unlocks it.
var sessionOpScript = redis.NewScript(prelude + `
if redis.call('EXISTS', KEYS[1]) == 1 then return {'busy', '', '', ''} end
local op = ARGV[1]
local exists = redis.call('EXISTS', KEYS[2]) == 1
if op == 'create' and exists then return {'exists', '', '', ''} end
if op ~= 'create' and not exists then return {'missing', '', '', ''} end
local prev = redis.call('HMGET', KEYS[2], 'nativeBinding', 'agentHarnessId', 'nativeState')
local binding, harness, state = prev[1] or '', prev[2] or '', prev[3] or ''
if op == 'delete' then
  redis.call('DEL', KEYS[2])
  return {'ok', binding, harness, state}
end
if op == 'reset' then
  redis.call('HDEL', KEYS[2], 'nativeBinding', 'nativeState')
  redis.call('HSET', KEYS[2], 'modelSelectionLocked', 'false')
elseif op == 'archive' then
  redis.call('HSET', KEYS[2], 'archived', 'true', 'modelSelectionLocked', 'false')
end
update_record(KEYS[2], 2, 'updated', now_ms())
return {'ok', binding, harness, state}
`)

// SessionOpStatus is the outcome of a session operation.
type SessionOpStatus string

// Session operation outcomes.
const (
	SessionOpOK      SessionOpStatus = "ok"
	SessionOpBusy    SessionOpStatus = "busy"
	SessionOpExists  SessionOpStatus = "exists"
	SessionOpMissing SessionOpStatus = "missing"
)

// SessionOpResult is what a session operation did.
type SessionOpResult struct {
	Status SessionOpStatus
	// PreviousBinding and PinnedHarness are the record's native binding and
	// pinned harness before the operation (for the harness's reset).
	PreviousBinding string
	PinnedHarness   string
	// PreviousState is the record's native state object before a reset or
	// delete (the router deletes it from the object store).
	PreviousState string
}

// SessionOp applies an owner-only operation to sessionKey's record, unless a
// turn of the session is running. fields are written by create, patch and
// reset (an empty value deletes the field).
func (s *Store) SessionOp(ctx context.Context, sessionKey, op string, fields SessionUpdate) (SessionOpResult, error) {
	switch op {
	case OpCreate, OpPatch, OpReset, OpDelete, OpArchive:
	default:
		return SessionOpResult{}, fmt.Errorf("session op %q", op)
	}
	k := keysFor(sessionKey)
	args := append([]any{op}, fields.args()...)
	res, err := sessionOpScript.Run(ctx, s.rdb, []string{k.lease(), k.session()}, args...).StringSlice()
	if err != nil {
		return SessionOpResult{}, fmt.Errorf("session %s: %w", op, err)
	}
	if len(res) != 4 {
		return SessionOpResult{}, fmt.Errorf("session %s: unexpected reply %q", op, res)
	}
	return SessionOpResult{Status: SessionOpStatus(res[0]), PreviousBinding: res[1], PinnedHarness: res[2], PreviousState: res[3]}, nil
}

// FieldsOf turns the optional fields of an owner's session op into an update:
// only the fields given are written.
func FieldsOf(sessionKey, sessionID, storePath, agentID, agentHarnessID string, locked *bool) SessionUpdate {
	u := SessionUpdate{teamster.SessionFieldSessionKey: sessionKey}
	set := func(f, v string) {
		if v != "" {
			u[f] = v
		}
	}
	set(teamster.SessionFieldSessionID, sessionID)
	set(teamster.SessionFieldStorePath, storePath)
	set(teamster.SessionFieldAgentID, agentID)
	set(teamster.SessionFieldAgentHarnessID, agentHarnessID)
	if locked != nil {
		u[teamster.SessionFieldModelSelectionLocked] = strconv.FormatBool(*locked)
	}
	return u
}
