package leases

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Key layout (docs/PROTOCOL.md, "Redis keys"). Every key of one session carries the
// hash tag {s}, s = hex of the first 12 bytes of sha256(sessionKey), so every
// session script touches one hash slot. The raw session key is stored inside
// the records, never in a key name or a log line.
const (
	keyRoot = "teamster:"

	// IndexShards is how many shards the reaper's index has. Every accept,
	// claim, renewal round and finish writes the index, so one key would put
	// the whole fleet's index traffic on one Redis Cluster slot; a session's
	// entries go to the shard its tag names, and reapers walk every shard.
	IndexShards = 32
)

// IndexKey is the reaper index shard k: teamster:{reaper-<k>}:due, a sorted
// set of "<tag>/<attemptId>" scored by the time (Unix ms) the reaper should
// next look at the attempt. Each shard lives in its own slot and is never
// touched by a session script.
func IndexKey(k int) string { return keyRoot + "{reaper-" + strconv.Itoa(k) + "}:due" }

// IsIndexKey reports whether key is a reaper index shard.
func IsIndexKey(key string) bool {
	k, ok := strings.CutPrefix(key, keyRoot+"{reaper-")
	if !ok {
		return false
	}
	n, ok := strings.CutSuffix(k, "}:due")
	i, err := strconv.Atoi(n)
	return ok && err == nil && i >= 0 && i < IndexShards
}

var indexKeys = func() []string {
	ks := make([]string, IndexShards)
	for i := range ks {
		ks[i] = IndexKey(i)
	}
	return ks
}()

// indexKeyOf is the index shard of a session's entries: its tag's first
// byte, mod IndexShards.
func indexKeyOf(tag string) string {
	if len(tag) < 2 {
		return indexKeys[0]
	}
	b, err := strconv.ParseUint(tag[:2], 16, 8)
	if err != nil {
		return indexKeys[0]
	}
	return indexKeys[int(b)%IndexShards]
}

// Tag returns the session hash s of sessionKey: hex of the first 12 bytes of its
// SHA-256. It is also what logs show in place of the session key.
func Tag(sessionKey string) string {
	sum := sha256.Sum256([]byte(sessionKey))
	return hex.EncodeToString(sum[:12])
}

// sessionKeys builds the keys of one session. The prefix is made once: a
// claim alone names five of the session's keys.
type sessionKeys struct{ tag, pfx string }

func keysFor(sessionKey string) sessionKeys { return keysOfTag(Tag(sessionKey)) }

func keysOfTag(tag string) sessionKeys { return sessionKeys{tag: tag, pfx: keyRoot + "{" + tag + "}:"} }

// prefix is "teamster:{s}:"; scripts derive per-attempt keys of earlier order
// entries from it, so those keys share the slot by construction.
func (k sessionKeys) prefix() string                  { return k.pfx }
func (k sessionKeys) lease() string                   { return k.prefix() + "lease" }
func (k sessionKeys) fence() string                   { return k.prefix() + "fence" }
func (k sessionKeys) session() string                 { return k.prefix() + "session" }
func (k sessionKeys) order() string                   { return k.prefix() + "order" }
func (k sessionKeys) attempt(attemptID string) string { return k.prefix() + "attempt:" + attemptID }
func (k sessionKeys) index() string                   { return indexKeyOf(k.tag) }

// sourceKey is teamster:source:{<id>}: one source authority, its own slot.
func sourceKey(id string) string { return keyRoot + "source:{" + id + "}" }

// indexMember is how an attempt appears in the reaper index.
func indexMember(tag, attemptID string) string { return tag + "/" + attemptID }

func parseIndexMember(m string) (tag, attemptID string, ok bool) {
	tag, attemptID, ok = strings.Cut(m, "/")
	return tag, attemptID, ok && tag != "" && attemptID != ""
}
