package leases

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DueEntry is one attempt the reaper should look at.
type DueEntry struct {
	Tag       string
	AttemptID string
}

// Due hands out up to limit due reaper index entries from each index shard
// (in one pipelined round trip), hiding each from other reapers for
// visibility. Several routers may call it at once; each entry goes to one of
// them per window. full reports whether some shard had limit entries due or
// more: call again.
func (s *Store) Due(ctx context.Context, limit int, visibility time.Duration) (entries []DueEntry, full bool, err error) {
	cmds := make([]*redis.Cmd, IndexShards)
	due := func() error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range indexKeys {
				cmds[i] = dueScript.EvalSha(ctx, p, []string{key}, limit, visibility.Milliseconds())
			}
			return nil
		})
		return err
	}
	// Redis forgot the scripts (a restart, a promoted replica): load them
	// and try once more.
	if err = due(); isNoScript(err) && s.Load(ctx) == nil {
		_ = due()
	}
	var failed error
	for i, c := range cmds {
		members, cerr := c.StringSlice()
		if cerr != nil {
			failed = cerr
			continue
		}
		full = full || len(members) >= limit
		for _, m := range members {
			tag, id, ok := parseIndexMember(m)
			if !ok {
				// Not ours to interpret; drop it so it is not handed out again.
				s.rdb.ZRem(ctx, indexKeys[i], m)
				continue
			}
			entries = append(entries, DueEntry{Tag: tag, AttemptID: id})
		}
	}
	if len(entries) == 0 && failed != nil {
		return nil, false, fmt.Errorf("reaper due: %w", failed)
	}
	// Shards that answered are handed out even when another failed (a
	// Redis Cluster node down): its entries wait for it.
	return entries, full, nil
}

// ReapAction is what the reaper does with an entry.
type ReapAction string

// Reap actions.
const (
	// ReapGone: nothing is owed (no record, or its outcome is published); the
	// entry was dropped from the index.
	ReapGone ReapAction = "gone"
	// ReapWait: not due yet; the entry was rescheduled to At.
	ReapWait ReapAction = "wait"
	// ReapPublish: an outcome is recorded and must be published (and then
	// marked with MarkPublished).
	ReapPublish ReapAction = "publish"
	// ReapResend: the outcome is published, but its marker did not confirm
	// sending the result event within its send window (it died or stalled
	// between its mark and its confirmation). The mark is now the caller's
	// (its token, a new window): it sends the durable result as the result
	// event and confirms with ConfirmSentTag.
	ReapResend ReapAction = "resend"
)

// Reaped is the reaper's decision about one attempt.
type Reaped struct {
	Action ReapAction
	At     time.Time
	// For ReapPublish and ReapResend: the recorded outcome and what
	// publishing and sending it need (Result is empty for ReapResend: the
	// stream holds it).
	Outcome   string
	Result    []byte // the worker's encoded result; empty for fleet outcomes
	HarnessID string
	WorkerID  string
	Fence     string
	ReplyTo   string
	// SeqMax is the highest event seq reserved for the attempt; a result the
	// reaper sends continues after it.
	SeqMax int64
}

// Reap decides one due attempt: queue_timeout for a queued attempt past its
// deadline, worker_lost for a claimed attempt whose lease is gone (both first
// writer wins), republishing of an outcome its writer did not mark published
// within grace, and sending the result event of an outcome whose marker did
// not confirm sending it within SendWindow (the mark becomes `by`'s). It
// reschedules or drops the index entry itself.
func (s *Store) Reap(ctx context.Context, e DueEntry, grace time.Duration, by string) (Reaped, error) {
	if by == "" {
		return Reaped{}, fmt.Errorf("reap: empty marker token")
	}
	k := keysOfTag(e.Tag)
	res, err := reapScript.Run(ctx, s.rdb, []string{k.order(), k.attempt(e.AttemptID), k.lease()},
		e.AttemptID, grace.Milliseconds(), s.retention.Milliseconds(), SendWindow.Milliseconds(), by).StringSlice()
	if err != nil {
		return Reaped{}, fmt.Errorf("reap: %w", err)
	}
	if len(res) == 0 {
		return Reaped{}, fmt.Errorf("reap: empty reply")
	}
	member, index := indexMember(e.Tag, e.AttemptID), indexKeyOf(e.Tag)
	switch ReapAction(res[0]) {
	case ReapGone:
		return Reaped{Action: ReapGone}, s.rdb.ZRem(ctx, index, member).Err()
	case ReapWait:
		at, _ := strconv.ParseInt(res[1], 10, 64)
		// XX: an entry dropped meanwhile (published) stays dropped.
		err := s.rdb.ZAddXX(ctx, index, redis.Z{Score: float64(at), Member: member}).Err()
		return Reaped{Action: ReapWait, At: time.UnixMilli(at)}, err
	case ReapPublish, ReapResend:
		if len(res) != 8 {
			return Reaped{}, fmt.Errorf("reap: unexpected reply %q", res)
		}
		seq, _ := strconv.ParseInt(res[7], 10, 64)
		return Reaped{Action: ReapAction(res[0]), Outcome: res[1], Result: []byte(res[2]), HarnessID: res[3],
			WorkerID: res[4], Fence: res[5], ReplyTo: res[6], SeqMax: seq}, nil
	}
	return Reaped{}, fmt.Errorf("reap: unexpected reply %q", res)
}

// MarkPublishedTag is MarkPublished for the reaper, which knows the session
// only by its tag.
func (s *Store) MarkPublishedTag(ctx context.Context, tag, attemptID, by string) (Marked, error) {
	return s.markPublished(ctx, tag, attemptID, by)
}

// MarkerToken is a fresh marker token for MarkPublished, for a caller that
// has none of its own (a reaper, per attempt it publishes).
func MarkerToken() string { return newEpoch() }

// Adopt makes an attempt's record agree with its durable result, whose
// outcome is "ok" or its error code: the results stream keeps the first
// result published, and that is the attempt's outcome (adoptScript). It
// reports whether the record changed.
func (s *Store) Adopt(ctx context.Context, tag, attemptID, outcome string) (bool, error) {
	k := keysOfTag(tag)
	n, err := adoptScript.Run(ctx, s.rdb, []string{k.order(), k.attempt(attemptID)}, attemptID, outcome, s.retention.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("adopt the durable result: %w", err)
	}
	return n == 1, nil
}
