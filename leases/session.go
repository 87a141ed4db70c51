package leases

import (
	"context"
	"iter"
	"maps"
	"strconv"
	"time"

	"github.com/teamster-fleet/teamster"
)

// SessionUpdate is a set of session record fields to write under a lease; an
// empty value deletes the field.
type SessionUpdate map[string]string

// OwnerUpdate is what an owner's successful turn writes: the whole record.
func OwnerUpdate(r teamster.SessionRecord) SessionUpdate {
	return SessionUpdate{
		teamster.SessionFieldSessionKey:           r.SessionKey,
		teamster.SessionFieldSessionID:            r.SessionID,
		teamster.SessionFieldStorePath:            r.StorePath,
		teamster.SessionFieldAgentID:              r.AgentID,
		teamster.SessionFieldModelSelectionLocked: strconv.FormatBool(r.ModelSelectionLocked),
		teamster.SessionFieldAgentHarnessID:       r.AgentHarnessID,
		teamster.SessionFieldOwnerPluginID:        r.OwnerPluginID,
		teamster.SessionFieldNativeBinding:        r.NativeBinding,
		teamster.SessionFieldNativeState:          r.NativeState,
	}
}

// BindingUpdate is what a delegate's turn writes: the native binding and the
// name of its saved native state (empty: none) only.
func BindingUpdate(binding, state string) SessionUpdate {
	return SessionUpdate{teamster.SessionFieldNativeBinding: binding, teamster.SessionFieldNativeState: state}
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
	teamster.SessionFieldSessionKey, teamster.SessionFieldSessionID, teamster.SessionFieldStorePath, teamster.SessionFieldAgentID, teamster.SessionFieldModelSelectionLocked,
	teamster.SessionFieldAgentHarnessID, teamster.SessionFieldOwnerPluginID, teamster.SessionFieldNativeBinding,
	teamster.SessionFieldNativeState,
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
		case teamster.SessionFieldSessionKey:
			r.SessionKey = v
		case teamster.SessionFieldSessionID:
			r.SessionID = v
		case teamster.SessionFieldStorePath:
			r.StorePath = v
		case teamster.SessionFieldAgentID:
			r.AgentID = v
		case teamster.SessionFieldModelSelectionLocked:
			r.ModelSelectionLocked = v == "true"
		case teamster.SessionFieldAgentHarnessID:
			r.AgentHarnessID = v
		case teamster.SessionFieldOwnerPluginID:
			r.OwnerPluginID = v
		case teamster.SessionFieldNativeBinding:
			r.NativeBinding = v
		case teamster.SessionFieldNativeState:
			r.NativeState = v
		case teamster.SessionFieldArchived:
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
