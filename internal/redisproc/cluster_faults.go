package redisproc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shard faults: frozen replication, a killed master, its failover and its restart.

// FreezeReplication freezes the replication of shard i (see Proxy). It
// fails under TLS, which the proxy cannot read, and when the shard's master
// is not its first master: after a failover the master is not behind the
// proxy.
func (c *Cluster) FreezeReplication(i int) error {
	if c.opts.TLS != nil {
		return errors.New("cannot freeze replication under TLS: the proxy cannot see PSYNC")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.master(ctx, i)
	if err != nil {
		return err
	}
	if m.proxy == nil {
		return fmt.Errorf("shard %d's master is %s, not its first master behind the proxy", i, m.Addr())
	}
	m.proxy.FreezeReplication()
	return nil
}

// ThawReplication lets shard i's replication through its proxy flow again.
func (c *Cluster) ThawReplication(i int) { c.nodes[2*i].proxy.ThawReplication() }

// KillMaster kills shard i's master with SIGKILL and returns the address it
// announced. It remembers the slots it served, for WaitFailover.
func (c *Cluster) KillMaster(i int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.master(ctx, i)
	if err != nil {
		return "", err
	}
	rc := m.Client()
	all, err := rc.ClusterSlots(ctx).Result()
	rc.Close()
	if err != nil {
		return "", err
	}
	k := &killedMaster{node: m}
	for _, s := range all {
		if len(s.Nodes) > 0 && s.Nodes[0].ID == m.id {
			k.slots = append(k.slots, redis.SlotRange{Start: int64(s.Start), End: int64(s.End)})
		}
	}
	if err := m.Kill(); err != nil {
		return "", err
	}
	c.mu.Lock()
	c.killed[i] = k
	c.mu.Unlock()
	return m.addr(), nil
}

// WaitFailover waits until shard i's other node has taken over from the
// master KillMaster killed: it answers ROLE as a master, and every running
// node reports cluster_state:ok and that node serving every slot the
// killed master served.
func (c *Cluster) WaitFailover(ctx context.Context, i int) error {
	c.mu.Lock()
	k := c.killed[i]
	c.mu.Unlock()
	if k == nil {
		return fmt.Errorf("no master of shard %d was killed", i)
	}
	survivor := c.shard(i)[0]
	if survivor == k.node {
		survivor = c.shard(i)[1]
	}
	return pollUntil(ctx, fmt.Sprintf("failover of shard %d to %s", i, survivor.Addr()), func(ctx context.Context) error {
		sc := survivor.Client()
		r, err := role(ctx, sc)
		sc.Close()
		if err != nil {
			return err
		}
		if r != "master" {
			return fmt.Errorf("%s answers ROLE %s", survivor.Addr(), r)
		}
		for _, n := range c.nodes {
			if !n.Running() {
				continue
			}
			if err := servesSlots(ctx, n, survivor.id, k.slots); err != nil {
				return err
			}
		}
		return nil
	})
}

// servesSlots is nil when n reports cluster_state:ok and the node with ID
// id serving every slot of ranges.
func servesSlots(ctx context.Context, n *clusterNode, id string, ranges []redis.SlotRange) error {
	rc := n.Client()
	defer rc.Close()
	if err := clusterStateOK(ctx, rc); err != nil {
		return err
	}
	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	for _, want := range ranges {
		for slot := int(want.Start); slot <= int(want.End); slot++ {
			owner := ""
			for _, s := range slots {
				if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
					owner = s.Nodes[0].ID
				}
			}
			if owner != id {
				return fmt.Errorf("%s: slot %d served by %q, not %s", n.Addr(), slot, owner, id)
			}
		}
	}
	return nil
}

// RestartKilled starts shard i's master that KillMaster killed again on its
// port, empty but with its cluster configuration, and returns once it has
// rejoined as a replica in sync with the shard's new master.
func (c *Cluster) RestartKilled(ctx context.Context, i int) error {
	c.mu.Lock()
	k := c.killed[i]
	delete(c.killed, i)
	c.mu.Unlock()
	if k == nil {
		return fmt.Errorf("no master of shard %d was killed", i)
	}
	if err := k.node.Start(); err != nil {
		return err
	}
	rc := k.node.Client()
	defer rc.Close()
	err := pollUntil(ctx, "restarted "+k.node.Addr()+" a replica", func(ctx context.Context) error {
		r, err := role(ctx, rc)
		if err != nil {
			return err
		}
		if r != "slave" {
			return fmt.Errorf("ROLE %s", r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return waitInSync(ctx, k.node.Redis)
}
