// Package leases is teamster's Redis state: session leases with fencing tokens,
// the per-session order, attempt records and their first-writer-wins outcomes,
// the session record, source authorities and the reaper's index. Every state
// change is one Lua script over the keys of one hash slot (scripts.go).
package leases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
)

// Attempt states.
const (
	StateAccepted = "accepted"
	StateFinished = "finished"
)

// OutcomeOK is the outcome recorded for an attempt that finished without error;
// any other outcome is an error code.
const OutcomeOK = "ok"

// Defaults.
const (
	// FinishedTTL is how long a finished attempt record stays by default,
	// for answering resubmits and republishing; it matches the results
	// stream's max age, and is the longest retention a store takes (a
	// resubmit answered from a record whose result the stream no longer
	// holds would wait for nothing).
	FinishedTTL = 24 * time.Hour
	// MinRetention is the shortest retention a store takes: far beyond the
	// reaper's republish grace and JetStream's duplicate window.
	MinRetention = 10 * time.Minute
	// SeqReservation is how many event seq numbers a claim reserves ahead; the
	// reaper's result continues after the reservation, so it may follow a gap
	// but never repeats a seq a worker sent.
	SeqReservation = 256
)

// Store runs teamster's scripts against one Redis (or Redis Cluster: every
// script stays within one slot).
type Store struct {
	rdb   redis.UniversalClient
	batch *batcher // the hot operations' shared pipelines (batch.go)
	// retention is how long a finished attempt record stays (FinishedTTL
	// unless WithRetention).
	retention time.Duration
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithRetention keeps finished attempt records for d instead of
// FinishedTTL: the horizon within which a resubmitted attempt id is answered
// from its record instead of being accepted again, and what bounds the
// records' memory in Redis (1.1 to 1.9 KB per published record, by Redis's
// hash-max-listpack-value). d must pass CheckRetention; 0 keeps FinishedTTL.
func WithRetention(d time.Duration) StoreOption {
	return func(s *Store) {
		if d != 0 {
			s.retention = d
		}
	}
}

// CheckRetention says why d cannot be a store's retention, nil when it can
// (0 stands for the default).
func CheckRetention(d time.Duration) error {
	if d != 0 && (d < MinRetention || d > FinishedTTL) {
		return fmt.Errorf("attempt retention %s is outside %s..%s", d, MinRetention, FinishedTTL)
	}
	return nil
}

// NewStore returns a Store on rdb.
func NewStore(rdb redis.UniversalClient, opts ...StoreOption) *Store {
	s := &Store{rdb: rdb, batch: newBatcher(rdb, maxPipelines), retention: FinishedTTL}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Client is the Redis client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Load loads every script into Redis's script cache, so pipelines can use
// EVALSHA. Run it at start-up; calls reload on their own when Redis forgot
// them (a restart).
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

func newEpoch() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("leases: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// AcceptArgs describes an attempt being accepted.
type AcceptArgs struct {
	SessionKey string
	AttemptID  string
	// Digest identifies the attempt (bus.AttemptDigest): the attempt id is
	// bound to it, so a resubmit of another attempt under the same id is
	// refused.
	Digest       string
	HarnessID    string
	ReplyTo      string
	QueueTimeout time.Duration
	// RunBudget is how long the attempt may run once claimed (timeout plus
	// settlement); it bounds the record's lifetime.
	RunBudget time.Duration
	// Reply is the encoded submit reply, returned to anyone resubmitting the id.
	Reply []byte
}

// Accepted is the outcome of Accept.
type Accepted struct {
	// New is true when this call accepted the attempt, false for a resubmit of
	// a known id.
	New bool
	// State is the attempt's state (accepted for a new attempt).
	State string
	// Reply is the stored submit reply of a known attempt.
	Reply []byte
	// Deadline is the attempt's queue deadline.
	Deadline time.Time
	// HarnessID and ReplyTo are what a known attempt was accepted with: a
	// resubmit is published again to that harness, never to the one a new
	// selection would name.
	HarnessID, ReplyTo string
}

// ErrAttemptReused says an attempt id is already bound to a different
// attempt: a resubmit must carry the same attempt as the first submit.
var ErrAttemptReused = teamster.Errorf(teamster.CodeInvalidRequest,
	"attemptId is already used for a different attempt (a resubmit must carry the same attempt)")

// Accept records an attempt as accepted: first the reaper's index, then, in one
// script, the attempt record and its place at the end of its session's order.
// A crash between the two leaves an index entry that the reaper drops, never
// an order entry the reaper cannot see. A known attempt id is answered from its
// record and never appended twice when the digest matches, and refused with
// ErrAttemptReused, changing nothing, when it does not.
func (s *Store) Accept(ctx context.Context, a AcceptArgs) (Accepted, error) {
	k := keysFor(a.SessionKey)
	// The index score is a hint: the reaper decides from the record, on
	// Redis's clock, and reschedules what is not yet due. The index entry and
	// the accept script go in one pipeline, in that order: one round trip,
	// and Redis runs them in order.
	due := time.Now().Add(a.QueueTimeout)
	member := redis.Z{Score: float64(due.UnixMilli()), Member: indexMember(k.tag, a.AttemptID)}
	ttl := a.QueueTimeout + a.RunBudget + s.retention
	keys := []string{k.attempt(a.AttemptID), k.order()}
	args := []any{a.AttemptID, a.QueueTimeout.Milliseconds(), ttl.Milliseconds(), a.Digest,
		"harness", a.HarnessID, "replyTo", a.ReplyTo, "reply", a.Reply, "session", a.SessionKey}
	// The id is claimed fleet-wide (its record is per session, but its
	// de-duplication and its result subject are per id), in the same round
	// trip; a conflict is undone below.
	idKey := attemptIDKey(a.AttemptID)
	claimID := redis.NewBoolCmd(ctx, "set", idKey, k.tag, "px", ttl.Milliseconds(), "nx")
	index := redis.NewIntCmd(ctx, "zadd", k.index(), "nx", member.Score, member.Member)
	accept := s.script(ctx, []redis.Cmder{claimID, index}, acceptScript, keys, args...)
	res, err := accept.StringSlice()
	if err != nil {
		return Accepted{}, fmt.Errorf("accept: %w", err)
	}
	for _, c := range []redis.Cmder{claimID, index} {
		if err := c.Err(); err != nil {
			// On a Redis Cluster the three keys live on different nodes,
			// and one may have failed where the others did not. A new
			// order entry whose index entry or id claim is missing is
			// withdrawn (best effort), so that nothing the reaper cannot
			// see holds the session's later turns; the caller may retry
			// the whole accept.
			if len(res) > 0 && res[0] == "accepted" {
				_, _ = s.Unaccept(ctx, a.SessionKey, a.AttemptID)
			}
			return Accepted{}, fmt.Errorf("accept: %w", err)
		}
	}
	if !claimID.Val() {
		owner, err := s.rdb.Get(ctx, idKey).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Accepted{}, fmt.Errorf("accept: %w", err)
		}
		if owner != "" && owner != k.tag {
			// Used under another session: withdraw what this call added.
			if len(res) > 0 && res[0] == "accepted" {
				if _, err := s.Unaccept(ctx, a.SessionKey, a.AttemptID); err != nil {
					return Accepted{}, fmt.Errorf("accept: withdraw a reused id: %w", err)
				}
			}
			return Accepted{}, ErrAttemptIDTaken
		}
	}
	if len(res) == 1 && res[0] == "conflict" {
		return Accepted{}, ErrAttemptReused
	}
	if len(res) != 6 {
		return Accepted{}, fmt.Errorf("accept: unexpected reply %q", res)
	}
	deadline, _ := strconv.ParseInt(res[3], 10, 64)
	return Accepted{New: res[0] == "accepted", State: res[1], Reply: []byte(res[2]), Deadline: time.UnixMilli(deadline),
		HarnessID: res[4], ReplyTo: res[5]}, nil
}

// Known answers a submit that was refused before it reached Accept (its
// selection or its delegation check failed now) from the record of its
// attempt id, when there is one: the attempt was accepted earlier, and a
// resubmit is answered from what was accepted, not refused because the
// fleet's view changed since. ErrNotFound when the id has no record under
// the session; ErrAttemptReused when its record holds another attempt.
func (s *Store) Known(ctx context.Context, sessionKey, attemptID, digest string) (Accepted, error) {
	rec, err := s.Attempt(ctx, sessionKey, attemptID)
	if err != nil {
		return Accepted{}, err
	}
	if rec.Digest != digest {
		return Accepted{}, ErrAttemptReused
	}
	return Accepted{State: rec.State, Reply: rec.Reply, Deadline: rec.Deadline, HarnessID: rec.HarnessID, ReplyTo: rec.ReplyTo}, nil
}

// ErrAttemptIDTaken says an attempt id is already used under another
// session. Attempt ids are fleet-wide: JetStream de-duplicates by id and the
// result subject is per id.
var ErrAttemptIDTaken = teamster.Errorf(teamster.CodeInvalidRequest, "attemptId is already used under another session")

// attemptIDKey is teamster:attemptid:{<id>}: which session an attempt id
// belongs to, its own slot.
func attemptIDKey(id string) string { return keyRoot + "attemptid:{" + id + "}" }

// Unaccept removes an attempt whose publish failed, only while it is still
// queued. It reports whether it removed it. The reaper drops the index entry.
func (s *Store) Unaccept(ctx context.Context, sessionKey, attemptID string) (bool, error) {
	k := keysFor(sessionKey)
	n, err := unacceptScript.Run(ctx, s.rdb, []string{k.attempt(attemptID), k.order()}, attemptID).Int()
	return n == 1, err
}

// Marked is what marking an outcome published found. The caller that marks
// it sends the result event; no other does.
type Marked int

const (
	// MarkedNow: this call marked the outcome published; its caller sends
	// the result event.
	MarkedNow Marked = iota + 1
	// MarkedBefore: another caller (a reaper, or the worker) marked it first
	// and sent the result event.
	MarkedBefore
	// MarkedGone: there is no record (Redis lost it, or its retention
	// ended), so no reaper will publish the outcome.
	MarkedGone
)

// SendWindow is how long a marker has, from its mark, to send the result
// event and confirm it (ConfirmSent). A marker that is held up past half of
// it sends nothing; a mark still unconfirmed after it is taken over by a
// reaper, which sends the result event (Reap, ReapResend). So a submitter
// gets its result event even when its sender died between the mark and the
// event; it gets two only when the sender sent and then could not confirm
// within the window (the client keeps the first).
const SendWindow = 5 * time.Second

// SendBy is the local deadline by which a marker whose mark was sent at
// markSent may still send the result event: half the send window, so that
// a marker and a reaper taking its mark over never both send while the
// marker's clock and Redis's run at the same rate.
func SendBy(markSent time.Time) time.Time { return markSent.Add(SendWindow / 2) }

// MarkPublished marks an attempt's outcome as durably published, by the
// marker token `by`, in one round trip, and opens the marker's send window.
// A marker retrying with the same token after a lost reply gets MarkedNow
// again. On an error the outcome may or may not be marked: its caller does
// not send the result event, and a reaper either publishes the outcome again
// (not marked) or takes the mark over once its send window has passed, and
// sends it.
func (s *Store) MarkPublished(ctx context.Context, sessionKey, attemptID, by string) (Marked, error) {
	return s.markPublished(ctx, Tag(sessionKey), attemptID, by)
}

func (s *Store) markPublished(ctx context.Context, tag, attemptID, by string) (Marked, error) {
	if by == "" {
		return 0, errors.New("mark published: empty marker token")
	}
	// The mark opens a send window that a reaper takes over when it ends
	// unconfirmed: the attempt's index entry is pointed at the window's end
	// in the same round trip (XX: an entry already dropped stays dropped),
	// whatever it pointed at before. Without it, a marker that died right
	// after its claim, before the keeper moved the entry off the queue
	// deadline, left its result event to wait for that deadline.
	due := float64(time.Now().Add(SendWindow).UnixMilli())
	move := redis.NewIntCmd(ctx, "zadd", indexKeyOf(tag), "xx", due, indexMember(tag, attemptID))
	n, err := s.script(ctx, []redis.Cmder{move}, markPublishedScript, []string{keysOfTag(tag).attempt(attemptID)}, by).Int()
	if err != nil {
		return 0, err
	}
	switch n {
	case 0:
		return MarkedGone, nil
	case 1:
		return MarkedNow, nil
	case 2:
		return MarkedBefore, nil
	}
	return 0, fmt.Errorf("mark published: unexpected reply %d", n)
}

// ConfirmSent records that the marker `by` sent the attempt's result event
// and drops the attempt from the reaper index, in one round trip: nothing is
// owed any more. It reports whether the mark was still by's (false: a
// reaper took it over and sends the event itself, or the record is gone).
func (s *Store) ConfirmSent(ctx context.Context, sessionKey, attemptID, by string) (bool, error) {
	return s.confirmSent(ctx, Tag(sessionKey), attemptID, by)
}

// ConfirmSentTag is ConfirmSent for the reaper, which knows the session only
// by its tag.
func (s *Store) ConfirmSentTag(ctx context.Context, tag, attemptID, by string) (bool, error) {
	return s.confirmSent(ctx, tag, attemptID, by)
}

func (s *Store) confirmSent(ctx context.Context, tag, attemptID, by string) (bool, error) {
	unindex := redis.NewIntCmd(ctx, "zrem", indexKeyOf(tag), indexMember(tag, attemptID))
	n, err := s.script(ctx, []redis.Cmder{unindex}, sentScript, []string{keysOfTag(tag).attempt(attemptID)}, by).Int()
	if err != nil {
		return false, fmt.Errorf("confirm sent: %w", err)
	}
	// A lost index removal is harmless: the reaper finds the result sent and
	// drops the entry itself.
	return n == 1, nil
}

// AttemptRecord is an attempt's record as stored.
type AttemptRecord struct {
	State string
	// Digest is the attempt's digest (bus.AttemptDigest), the id's binding.
	Digest    string
	HarnessID string
	ReplyTo   string
	Reply     []byte
	Deadline  time.Time
	WorkerID  string
	Fence     string
	SeqMax    int64
	Outcome   string
	Result    []byte
	Published bool
	// Sent says the marker confirmed sending the result event.
	Sent bool
}

// ErrNotFound says a record does not exist.
var ErrNotFound = errors.New("not found")

// Attempt reads an attempt's record; ErrNotFound when there is none.
func (s *Store) Attempt(ctx context.Context, sessionKey, attemptID string) (*AttemptRecord, error) {
	return s.attemptByTag(ctx, Tag(sessionKey), attemptID)
}

func (s *Store) attemptByTag(ctx context.Context, tag, attemptID string) (*AttemptRecord, error) {
	m, err := s.rdb.HGetAll(ctx, keysOfTag(tag).attempt(attemptID)).Result()
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, ErrNotFound
	}
	deadline, _ := strconv.ParseInt(m["deadline"], 10, 64)
	seq, _ := strconv.ParseInt(m["seqmax"], 10, 64)
	return &AttemptRecord{
		State: m["state"], Digest: m["digest"], HarnessID: m["harness"], ReplyTo: m["replyTo"], Reply: []byte(m["reply"]),
		Deadline: time.UnixMilli(deadline), WorkerID: m["worker"], Fence: m["fence"], SeqMax: seq,
		Outcome: m["outcome"], Result: []byte(m["result"]), Published: m["published"] != "", Sent: m["sent"] != "",
	}, nil
}

// LeaseInfo is a session's lease as stored.
type LeaseInfo struct {
	// Tag is the session's hash (set by Leases and SessionByTag).
	Tag       string        `json:"session,omitempty"`
	Holder    string        `json:"holder"`
	AttemptID string        `json:"attempt"`
	Fence     string        `json:"fence"`
	TTL       time.Duration `json:"ttlNs"`
}

// LeaseOf reads sessionKey's lease; ErrNotFound when none is held.
func (s *Store) LeaseOf(ctx context.Context, sessionKey string) (*LeaseInfo, error) {
	k := keysFor(sessionKey)
	var get *redis.MapStringStringCmd
	var ttl *redis.DurationCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.HGetAll(ctx, k.lease())
		ttl = p.PTTL(ctx, k.lease())
		return nil
	})
	if err != nil {
		return nil, err
	}
	m := get.Val()
	if len(m) == 0 {
		return nil, ErrNotFound
	}
	return &LeaseInfo{Holder: m["holder"], AttemptID: m["attempt"], Fence: m["fence"], TTL: ttl.Val()}, nil
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Leases counts the session leases held and returns up to max of them, by
// scanning the keyspace (an operator's view, not a hot path): every master's
// of a Redis Cluster.
func (s *Store) Leases(ctx context.Context, max int) (int, []LeaseInfo, error) {
	var held int
	var shown []LeaseInfo
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, keyRoot+"{*}:lease", 1000).Iterator()
		for iter.Next(ctx) {
			held++
			if len(shown) >= max {
				continue
			}
			key := iter.Val()
			m, err := s.rdb.HGetAll(ctx, key).Result()
			if err != nil || len(m) == 0 {
				continue
			}
			ttl, _ := s.rdb.PTTL(ctx, key).Result()
			shown = append(shown, LeaseInfo{Tag: tagOf(key), Holder: m["holder"], AttemptID: m["attempt"], Fence: m["fence"], TTL: ttl})
		}
		return iter.Err()
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
		return held, shown, err
	}
	return held, shown, scan(ctx, s.rdb)
}

// tagOf returns the hash tag of a session key name.
func tagOf(key string) string {
	i := strings.IndexByte(key, '{')
	j := strings.IndexByte(key, '}')
	if i < 0 || j < i {
		return ""
	}
	return key[i+1 : j]
}
