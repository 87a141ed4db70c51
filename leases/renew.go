package leases

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// RenewNow renews every held lease in one pipelined round trip: one renew
// script per lease and one ZADD per reaper index shard that moves the
// leases' index entries to their new expiry. The keeper's loop starts one
// every interval (on a goroutine of its own); RenewNow runs one on the
// caller's goroutine, with the leases the loop holds when it is called.
func (k *Keeper) RenewNow(ctx context.Context) { k.renew(ctx, k.held()) }

// renew is one renewal round of leases. It applies what Redis answered to
// each lease itself: a renewal re-arms the lease's self-fence timer, a refusal
// ends the lease (which tells the loop).
func (k *Keeper) renew(ctx context.Context, leases []*Lease) {
	if len(leases) == 0 {
		return
	}
	// Self-fencing runs on each lease's own timer, so a slow round cannot
	// delay it; the timeout only keeps a hung connection from holding the
	// round past the next one. It is a Redis round trip's timeout, which
	// go-redis makes socket deadlines of: on the real clock.
	ctx, cancel := context.WithTimeout(ctx, k.interval)
	defer cancel()
	sentAt := k.clock.Now()
	cmds, reserved, err := k.renewPipeline(ctx, leases)
	if isNoScript(err) {
		if lerr := k.store.Load(ctx); lerr == nil {
			cmds, reserved, err = k.renewPipeline(ctx, leases)
		}
	}
	if k.onRenew != nil {
		k.onRenew(len(leases), err)
	}
	if err != nil && cmds == nil {
		k.log.WithField("leases", len(leases)).Warn("lease renewal failed: " + err.Error())
		return
	}
	failed := 0
	for i, l := range leases {
		n, cerr := cmds[i].Int()
		switch {
		case cerr != nil:
			failed++
		case n == 1:
			l.renewed(sentAt, reserved[i])
		default:
			l.lose("renewal refused: the lease expired or is held under another fence")
		}
	}
	if failed > 0 {
		k.log.WithField("leases", failed).Warn("lease renewal failed: " + err.Error())
	}
}

func (k *Keeper) renewPipeline(ctx context.Context, leases []*Lease) ([]*redis.Cmd, []int64, error) {
	cmds := make([]*redis.Cmd, len(leases))
	reserved := make([]int64, len(leases))
	ttlMs := strconv.FormatInt(k.ttl.Milliseconds(), 10)
	expiry := indexScore(k.ttl)
	shards := map[string][]redis.Z{}
	_, err := k.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range leases {
			reserved[i] = l.reservation()
			cmds[i] = renewScript.EvalSha(ctx, p, l.renewKeys(), l.fence, ttlMs, reserved[i], k.holder, l.attemptID)
			key := l.keys.index()
			shards[key] = append(shards[key], redis.Z{Score: expiry, Member: l.indexMember()})
		}
		for key, zs := range shards {
			p.ZAddXX(ctx, key, zs...)
		}
		return nil
	})
	if err != nil {
		for _, c := range cmds {
			if isNoScript(c.Err()) {
				return nil, nil, c.Err()
			}
		}
	}
	return cmds, reserved, err
}
