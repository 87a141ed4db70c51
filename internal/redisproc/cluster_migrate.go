package redisproc

import (
	"context"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"
)

// MigrateSlots moves slots from shard from's master to shard to's, as
// redis-cli --cluster reshard does: for each slot CLUSTER SETSLOT IMPORTING
// on the target and MIGRATING on the source, MIGRATE its keys in batches,
// then CLUSTER SETSLOT NODE on the target, the source and the other
// masters. Clients meanwhile get ASK for keys already moved and MOVED
// afterwards.
func (c *Cluster) MigrateSlots(ctx context.Context, from, to int, slots []int) error {
	src, err := c.master(ctx, from)
	if err != nil {
		return err
	}
	dst, err := c.master(ctx, to)
	if err != nil {
		return err
	}
	masters := []*clusterNode{dst, src}
	for i := 0; i < clusterShards; i++ {
		if i != from && i != to {
			m, err := c.master(ctx, i)
			if err != nil {
				return err
			}
			masters = append(masters, m)
		}
	}
	clients := make([]*redis.Client, len(masters))
	for i, m := range masters {
		clients[i] = m.Client()
		defer clients[i].Close()
	}
	dc, sc := clients[0], clients[1]
	for _, slot := range slots {
		if err := dc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
			return fmt.Errorf("slot %d: SETSLOT IMPORTING on %s: %w", slot, dst.Addr(), err)
		}
		if err := sc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
			return fmt.Errorf("slot %d: SETSLOT MIGRATING on %s: %w", slot, src.Addr(), err)
		}
		if err := c.migrateKeys(ctx, sc, dst, slot); err != nil {
			return err
		}
		for i, mc := range clients {
			if err := mc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
				return fmt.Errorf("slot %d: SETSLOT NODE on %s: %w", slot, masters[i].Addr(), err)
			}
		}
	}
	return nil
}

// migrateKeys moves every key of slot from the source (sc) to dst, 100 at
// a time, until the source has none left.
func (c *Cluster) migrateKeys(ctx context.Context, sc *redis.Client, dst *clusterNode, slot int) error {
	host, port, _ := net.SplitHostPort(dst.Addr())
	for {
		keys, err := sc.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("slot %d: GETKEYSINSLOT: %w", slot, err)
		}
		if len(keys) == 0 {
			return nil
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000}
		switch {
		case c.opts.Password != "" && c.opts.Username != "":
			args = append(args, "AUTH2", c.opts.Username, c.opts.Password)
		case c.opts.Password != "":
			args = append(args, "AUTH", c.opts.Password)
		}
		args = append(args, "KEYS")
		for _, k := range keys {
			args = append(args, k)
		}
		if err := sc.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("slot %d: MIGRATE %d keys to %s: %w", slot, len(keys), dst.Addr(), err)
		}
	}
}
