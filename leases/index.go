package leases

// The Redis side of the keeper's reaper index moves. The queue and the
// one-batch-in-flight rule are the keeper loop's (Keeper.sendMoves); this file
// builds the moves and writes one batch.

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// indexMove is one reaper index update: ZADD XX key score member.
type indexMove struct {
	key    string // the index shard
	member string
	score  float64
}

// maxIndexBatch bounds the members of one ZADD.
const maxIndexBatch = 1000

// indexScore is a reaper index score: the wall-clock time, in Unix ms, after
// from now. It is not read from the keeper's injected clock on purpose: the
// reaper's due script compares scores with Redis's own TIME, as it does the
// scores Store.Accept and MarkPublished write, so they must be on the clock
// Redis keeps, whatever clock measures the leases locally.
func indexScore(after time.Duration) float64 {
	return float64(time.Now().Add(after).UnixMilli())
}

// nudges are the index moves that point the reapers, now, at the attempts
// named (space-separated ids): a claim's walk gave them a fleet outcome, or the
// claim found one claimed or concluded before. Their index entries may still sit at their
// queue deadlines (a claim whose reply was lost never moved them).
func nudges(tag, concluded string) []indexMove {
	ids := strings.Fields(concluded)
	if len(ids) == 0 {
		return nil
	}
	now := indexScore(0)
	moves := make([]indexMove, 0, len(ids))
	for _, id := range ids {
		moves = append(moves, indexMove{key: indexKeyOf(tag), member: indexMember(tag, id), score: now})
	}
	return moves
}

// writeIndex sends one batch of moves, one ZADD XX per shard, in one pipeline.
// XX: an entry already removed (published) is never re-created. A failure is
// logged: the attempts are then found at their queue deadlines.
func (k *Keeper) writeIndex(batch []indexMove) {
	shards := map[string][]redis.Z{}
	for _, m := range batch {
		shards[m.key] = append(shards[m.key], redis.Z{Score: m.score, Member: m.member})
	}
	// A Redis round trip's timeout: go-redis makes socket deadlines of it,
	// so it is on the real clock, not the injected one.
	ctx, cancel := context.WithTimeout(context.Background(), k.ttl)
	defer cancel()
	_, err := k.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for key, zs := range shards {
			p.ZAddXX(ctx, key, zs...)
		}
		return nil
	})
	if err != nil {
		k.log.WithField("entries", len(batch)).Warn("reaper index not updated (claimed attempts are found at their queue deadline instead of their lease expiry): " + err.Error())
	}
}
