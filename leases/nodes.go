package leases

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// NodeIDs returns the replication id of every Redis primary the store
// writes to, by address: one for a standalone or Sentinel-managed Redis,
// one per shard of a Redis Cluster. A node gets a new replication id when
// it is promoted from replica and when it restarts: the two ways it can
// come to serve slots without the last writes made there before.
func (s *Store) NodeIDs(ctx context.Context) (map[string]string, error) {
	ids := map[string]string{}
	info := func(ctx context.Context, c *redis.Client) error {
		txt, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO replication at %s: %w", c.Options().Addr, err)
		}
		id := replID(txt)
		if id == "" {
			return fmt.Errorf("INFO replication at %s: no master_replid", c.Options().Addr)
		}
		ids[c.Options().Addr] = id
		return nil
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return info(ctx, c)
		})
		return ids, err
	}
	txt, err := s.rdb.Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO replication: %w", err)
	}
	if id := replID(txt); id != "" {
		ids["primary"] = id
		return ids, nil
	}
	return nil, fmt.Errorf("INFO replication: no master_replid")
}

func replID(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok {
			return v
		}
	}
	return ""
}

// markBatch bounds the scripts of one MarkNodes pipeline.
const markBatch = 2048

// MarkNodes runs markNodeScript on the node marker of every hash slot: each
// marker that names another node than the one now serving its slot is set to
// that node, from now, which starts the slot's new-epoch quarantine at once
// instead of at the slot's next first claim (claimScript). Routers call it
// when NodeIDs changes. It returns how many markers changed.
func (s *Store) MarkNodes(ctx context.Context) (int, error) {
	changed := 0
	for from := 0; from < Slots; from += markBatch {
		cmds := make([]*redis.Cmd, 0, markBatch)
		run := func() error {
			cmds = cmds[:0]
			_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for slot := from; slot < min(from+markBatch, Slots); slot++ {
					cmds = append(cmds, markNodeScript.EvalSha(ctx, p, []string{nodeKey(slot)}))
				}
				return nil
			})
			return err
		}
		err := run()
		if isNoScript(err) {
			if err = s.Load(ctx); err == nil {
				err = run()
			}
		}
		if err != nil {
			return changed, fmt.Errorf("mark nodes: %w", err)
		}
		for _, c := range cmds {
			if n, _ := c.Int(); n == 1 {
				changed++
			}
		}
	}
	return changed, nil
}
