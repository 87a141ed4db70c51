package leases

// Operator reads: an attempt by its id, the attempts in flight, a session's
// record, lease and order. They read only what the fleet keeps anyway (the
// attempt-id key, the reaper index, a session's own keys) and are bounded;
// nothing scans the keyspace.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
)

// AttemptView is an attempt's record as an operator reads it. Zero times are
// steps the attempt has not reached.
type AttemptView struct {
	AttemptID string
	// Tag is the session's hash; SessionKey its raw key (empty for records
	// written before routers stored it).
	Tag        string
	SessionKey string
	// State is accepted, claimed or finished.
	State         string
	HarnessID     string
	WorkerID      string
	Fence         string
	AcceptedAt    time.Time
	QueueDeadline time.Time
	ClaimedAt     time.Time
	FinishedAt    time.Time
	// Outcome is ok or an error code, FinishedBy "worker", "fleet" (the
	// reaper: queue_timeout, worker_lost) or "stream" (adopted from the
	// durable result).
	Outcome    string
	FinishedBy string
	// PublishedBy is who published the durable result (a worker or router
	// id), PublishedAt when; Sent says the result event was confirmed sent.
	PublishedBy string
	PublishedAt time.Time
	Sent        bool
	// Result is the result as the worker recorded it (JSON), when it did.
	Result []byte
	// Expires is how long Redis keeps the record.
	Expires time.Duration
}

// Running says the attempt is claimed and has no outcome yet.
func (v *AttemptView) Running() bool { return v.State == "claimed" }

// tagPattern is a session tag: 24 lower-case hex digits.
var tagPattern = regexp.MustCompile(`^[0-9a-f]{24}$`)

// IsTag says s has the form of a session tag (Tag's output).
func IsTag(s string) bool { return tagPattern.MatchString(s) }

// AttemptByID reads an attempt's record from its id alone: the attempt-id key
// names its session. ErrNotFound when Redis keeps no record of it (never
// accepted, or past its retention).
func (s *Store) AttemptByID(ctx context.Context, attemptID string) (*AttemptView, error) {
	tag, err := s.rdb.Get(ctx, attemptIDKey(attemptID)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	views, err := s.attemptViews(ctx, []DueEntry{{Tag: tag, AttemptID: attemptID}})
	if err != nil {
		return nil, err
	}
	if len(views) == 0 {
		return nil, ErrNotFound
	}
	return &views[0], nil
}

// InFlightView is what InFlight found.
type InFlightView struct {
	// Total is the reaper index's entries: attempts queued, running, or
	// finished and not yet confirmed delivered.
	Total int64
	// Attempts are up to the limit of them, newest accepted first.
	Attempts []AttemptView
}

// InFlight reads the attempts in the reaper index (queued, running, or
// finished and still being delivered): up to limit per index shard, so at
// most IndexShards×limit records, returned newest accepted first and cut to
// limit. Entries whose record has expired are left out.
func (s *Store) InFlight(ctx context.Context, limit int) (*InFlightView, error) {
	if limit < 1 {
		return nil, fmt.Errorf("in flight: limit %d is not positive", limit)
	}
	ranges := make([]*redis.StringSliceCmd, IndexShards)
	counts := make([]*redis.IntCmd, IndexShards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range indexKeys {
			// Highest scores first: the latest deadlines, so the newest.
			ranges[i] = p.ZRevRange(ctx, key, 0, int64(limit-1))
			counts[i] = p.ZCard(ctx, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("in flight: %w", err)
	}
	out := &InFlightView{}
	var entries []DueEntry
	for i := range indexKeys {
		out.Total += counts[i].Val()
		for _, m := range ranges[i].Val() {
			if tag, id, ok := parseIndexMember(m); ok {
				entries = append(entries, DueEntry{Tag: tag, AttemptID: id})
			}
		}
	}
	views, err := s.attemptViews(ctx, entries)
	if err != nil {
		return nil, fmt.Errorf("in flight: %w", err)
	}
	sort.SliceStable(views, func(i, j int) bool { return views[i].AcceptedAt.After(views[j].AcceptedAt) })
	if len(views) > limit {
		views = views[:limit]
	}
	out.Attempts = views
	return out, nil
}

// InFlightCount is the reaper index's entries (attempts queued, running, or
// finished and not yet confirmed delivered): one ZCARD per shard, in one
// pipeline.
func (s *Store) InFlightCount(ctx context.Context) (int64, error) {
	counts := make([]*redis.IntCmd, IndexShards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range indexKeys {
			counts[i] = p.ZCard(ctx, key)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("in flight: %w", err)
	}
	var n int64
	for _, c := range counts {
		n += c.Val()
	}
	return n, nil
}

// AttemptViews reads the records of attempts whose session tags are known, in
// one pipeline; attempts without a record are left out.
func (s *Store) AttemptViews(ctx context.Context, entries []DueEntry) ([]AttemptView, error) {
	return s.attemptViews(ctx, entries)
}

// TagsOf reads the session tags of attempt ids from their attempt-id keys, in
// one pipeline; an id without one maps to "".
func (s *Store) TagsOf(ctx context.Context, attemptIDs []string) (map[string]string, error) {
	cmds := make([]*redis.StringCmd, len(attemptIDs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range attemptIDs {
			cmds[i] = p.Get(ctx, attemptIDKey(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make(map[string]string, len(attemptIDs))
	for i, id := range attemptIDs {
		out[id] = cmds[i].Val()
	}
	return out, nil
}

func (s *Store) attemptViews(ctx context.Context, entries []DueEntry) ([]AttemptView, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	gets := make([]*redis.MapStringStringCmd, len(entries))
	ttls := make([]*redis.DurationCmd, len(entries))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range entries {
			key := keysOfTag(e.Tag).attempt(e.AttemptID)
			gets[i] = p.HGetAll(ctx, key)
			ttls[i] = p.PTTL(ctx, key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]AttemptView, 0, len(entries))
	for i, e := range entries {
		m := gets[i].Val()
		if len(m) == 0 {
			continue
		}
		out = append(out, AttemptView{
			AttemptID: e.AttemptID, Tag: e.Tag, SessionKey: m["session"], State: m["state"], HarnessID: m["harness"],
			WorkerID: m["worker"], Fence: m["fence"], AcceptedAt: msTime(m["accepted"]), QueueDeadline: msTime(m["deadline"]),
			ClaimedAt: msTime(m["claimed"]), FinishedAt: msTime(m["finished"]), Outcome: m["outcome"], FinishedBy: m["by"],
			PublishedBy: m["published"], PublishedAt: msTime(m["pubat"]), Sent: m["sent"] != "", Result: []byte(m["result"]),
			Expires: ttls[i].Val(),
		})
	}
	return out, nil
}

// msTime reads a Unix-ms field; zero when it is absent.
func msTime(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// SessionView is a session's state as an operator reads it.
type SessionView struct {
	Tag string
	// Record is the session record; nil when no owner turn or session op
	// wrote one.
	Record *teamster.SessionRecord
	// Lease is the session's lease; nil when none is held.
	Lease *LeaseInfo
	// Order is the session's attempts not yet finished, in order (the
	// head runs or is next), up to the limit; OrderLen is all of them.
	Order    []string
	OrderLen int64
	// Fence is the session's last fence handed out ("" before any claim).
	Fence string
}

// SessionByTag reads a session's record, lease, fence and order (up to limit
// entries of it) by its tag, in one pipeline. ErrNotFound when Redis holds
// none of them.
func (s *Store) SessionByTag(ctx context.Context, tag string, limit int) (*SessionView, error) {
	k := keysOfTag(tag)
	var rec, lease, fence *redis.MapStringStringCmd
	var ttl *redis.DurationCmd
	var order *redis.StringSliceCmd
	var n *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGetAll(ctx, k.session())
		lease = p.HGetAll(ctx, k.lease())
		ttl = p.PTTL(ctx, k.lease())
		fence = p.HGetAll(ctx, k.fence())
		order = p.LRange(ctx, k.order(), 0, int64(limit-1))
		n = p.LLen(ctx, k.order())
		return nil
	})
	if err != nil {
		return nil, err
	}
	v := &SessionView{Tag: tag, Order: order.Val(), OrderLen: n.Val()}
	if m := rec.Val(); len(m) > 0 {
		v.Record = sessionFrom(maps.All(m))
	}
	if m := lease.Val(); len(m) > 0 {
		v.Lease = &LeaseInfo{Tag: tag, Holder: m["holder"], AttemptID: m["attempt"], Fence: m["fence"], TTL: ttl.Val()}
	}
	if m := fence.Val(); len(m) > 0 && m["epoch"] != "" {
		v.Fence = m["epoch"] + ":" + m["n"]
	}
	if v.Record == nil && v.Lease == nil && v.OrderLen == 0 && v.Fence == "" {
		return nil, ErrNotFound
	}
	return v, nil
}

// NativeStates reads, in one pipeline, the native state object the record of
// each session tag names ("" when it names none or there is no record).
func (s *Store) NativeStates(ctx context.Context, tags []string) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(tags))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, tag := range tags {
			cmds[i] = p.HGet(ctx, keysOfTag(tag).session(), teamster.SessionFieldNativeState)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]string, len(tags))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}
