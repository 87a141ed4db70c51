package leases

import (
	"context"
	"iter"
	"maps"
	"strconv"
	"time"

	"github.com/teamster-fleet/teamster"
)

// Session record fields (teamster:{s}:session): teamster.SessionRecord's.
const (
	FieldSessionKey           = teamster.SessionFieldSessionKey
	FieldSessionID            = teamster.SessionFieldSessionID
	FieldStorePath            = teamster.SessionFieldStorePath
	FieldAgentID              = teamster.SessionFieldAgentID
	FieldModelSelectionLocked = teamster.SessionFieldModelSelectionLocked
	FieldAgentHarnessID       = teamster.SessionFieldAgentHarnessID
	FieldOwnerPluginID        = teamster.SessionFieldOwnerPluginID
	FieldNativeBinding        = teamster.SessionFieldNativeBinding
	FieldArchived             = teamster.SessionFieldArchived
)

// SessionUpdate is a set of session record fields to write under a lease; an
// empty value deletes the field.
type SessionUpdate map[string]string

// OwnerUpdate is what an owner's successful turn writes: the whole record.
func OwnerUpdate(r teamster.SessionRecord) SessionUpdate {
	return SessionUpdate{
		FieldSessionKey:           r.SessionKey,
		FieldSessionID:            r.SessionID,
		FieldStorePath:            r.StorePath,
		FieldAgentID:              r.AgentID,
		FieldModelSelectionLocked: strconv.FormatBool(r.ModelSelectionLocked),
		FieldAgentHarnessID:       r.AgentHarnessID,
		FieldOwnerPluginID:        r.OwnerPluginID,
		FieldNativeBinding:        r.NativeBinding,
	}
}

// BindingUpdate is what a delegate's turn writes: the native binding only.
func BindingUpdate(binding string) SessionUpdate {
	return SessionUpdate{FieldNativeBinding: binding}
}

// args flattens the update into script arguments, in a stable order.
func (u SessionUpdate) args() []any {
	out := make([]any, 0, 2*len(u))
	for i, f := range sessionFields {
		if v, ok := u[f]; ok {
			out = append(out, sessionFieldArgs[i], v)
		}
	}
	return out
}

var sessionFields = []string{
	FieldSessionKey, FieldSessionID, FieldStorePath, FieldAgentID, FieldModelSelectionLocked,
	FieldAgentHarnessID, FieldOwnerPluginID, FieldNativeBinding,
}

// sessionFieldArgs holds sessionFields as script arguments, boxed once
// rather than on every finish.
var sessionFieldArgs = func() []any {
	out := make([]any, len(sessionFields))
	for i, f := range sessionFields {
		out[i] = f
	}
	return out
}()

// Session reads sessionKey's record; ErrNotFound when there is none.
func (s *Store) Session(ctx context.Context, sessionKey string) (*teamster.SessionRecord, error) {
	m, err := s.rdb.HGetAll(ctx, keysFor(sessionKey).session()).Result()
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, ErrNotFound
	}
	return sessionFrom(maps.All(m)), nil
}

// sessionFrom reads a session record from its hash fields: HGETALL's map
// (maps.All) or the flat field, value list the claim script returns
// (fieldPairs). Unknown fields are ignored.
func sessionFrom(fields iter.Seq2[string, string]) *teamster.SessionRecord {
	r := &teamster.SessionRecord{Updated: time.UnixMilli(0)}
	for field, v := range fields {
		switch field {
		case FieldSessionKey:
			r.SessionKey = v
		case FieldSessionID:
			r.SessionID = v
		case FieldStorePath:
			r.StorePath = v
		case FieldAgentID:
			r.AgentID = v
		case FieldModelSelectionLocked:
			r.ModelSelectionLocked = v == "true"
		case FieldAgentHarnessID:
			r.AgentHarnessID = v
		case FieldOwnerPluginID:
			r.OwnerPluginID = v
		case FieldNativeBinding:
			r.NativeBinding = v
		case FieldArchived:
			r.Archived = v == "true"
		case teamster.SessionFieldFence:
			r.Fence = v
		case teamster.SessionFieldUpdated:
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.Updated = time.UnixMilli(ms)
		}
	}
	return r
}

// fieldPairs yields a flat field, value list as pairs.
func fieldPairs(kv []string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if !yield(kv[i], kv[i+1]) {
				return
			}
		}
	}
}
