package redisproc

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Starting a Cluster: its nodes and proxies, the shards, until cluster_state:ok.

func (c *Cluster) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 2*clusterShards; i++ {
		n, err := c.startNode(i%2 == 0)
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
	}
	for i, n := range c.nodes {
		rc := n.Client()
		n.id, _ = rc.ClusterMyID(ctx).Result()
		var err error
		if n.id == "" {
			err = fmt.Errorf("node %s: no CLUSTER MYID", n.Addr())
		} else if i%2 == 0 {
			// Distinct epochs from the start, as redis-cli assigns them:
			// no collisions to resolve.
			err = rc.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i/2+1).Err()
		}
		rc.Close()
		if err != nil {
			return err
		}
	}
	first := c.nodes[0].Client()
	defer first.Close()
	for _, n := range c.nodes[1:] {
		host, port, _ := net.SplitHostPort(n.addr())
		if err := first.Do(ctx, "CLUSTER", "MEET", host, port, n.busPort()).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", n.addr(), err)
		}
	}
	for i := 0; i < clusterShards; i++ {
		lo, hi := shardSlots(i)
		m := c.nodes[2*i].Client()
		err := m.ClusterAddSlotsRange(ctx, lo, hi).Err()
		m.Close()
		if err != nil {
			return fmt.Errorf("ADDSLOTSRANGE %d %d on %s: %w", lo, hi, c.nodes[2*i].Addr(), err)
		}
	}
	for i := 0; i < clusterShards; i++ {
		master, replica := c.nodes[2*i], c.nodes[2*i+1]
		rc := replica.Client()
		// Until the handshake reaches it, the replica does not know the
		// master's ID.
		err := pollUntil(ctx, "CLUSTER REPLICATE on "+replica.Addr(), func(ctx context.Context) error {
			return rc.ClusterReplicate(ctx, master.id).Err()
		})
		rc.Close()
		if err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitNodeReady(ctx, n); err != nil {
			return err
		}
	}
	for i := 0; i < clusterShards; i++ {
		if err := waitInSync(ctx, c.nodes[2*i+1].Redis); err != nil {
			return err
		}
		if c.opts.TLS != nil {
			continue
		}
		p := c.nodes[2*i].proxy
		err := pollUntil(ctx, "replica linked through the proxy "+p.Addr(), func(context.Context) error {
			if n := p.ReplicationLinks(); n != 1 {
				return fmt.Errorf("%d replication links", n)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// startNode starts one node; a first master behind a new proxy whose port
// it announces.
func (c *Cluster) startNode(master bool) (*clusterNode, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	bus, err := FreePort()
	if err != nil {
		return nil, err
	}
	n := &clusterNode{}
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
		"--cluster-node-timeout", strconv.FormatInt(c.opts.NodeTimeout.Milliseconds(), 10),
		"--cluster-port", strconv.Itoa(bus),
		"--cluster-announce-ip", "127.0.0.1",
		"--cluster-announce-bus-port", strconv.Itoa(bus),
		// A replica fails over however long it has been cut off, and
		// stays with its master.
		"--cluster-replica-validity-factor", "0",
		"--cluster-allow-replica-migration", "no",
		"--dbfilename", fmt.Sprintf("dump-%d.rdb", port),
		"--repl-diskless-sync-delay", "0",
		// A replica's offset stays 0, and CLUSTER SLOTS leaves it out,
		// until the master sends it something: a PING every second.
		"--repl-ping-replica-period", "1",
	}
	if master {
		if n.proxy, err = NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
			return nil, err
		}
		announce := "--cluster-announce-port"
		if c.opts.TLS != nil {
			announce = "--cluster-announce-tls-port"
		}
		args = append(args, announce, strconv.Itoa(n.proxy.Port()))
	}
	if c.opts.TLS != nil {
		args = append(args, "--tls-cluster", "yes")
	}
	if c.opts.Password != "" {
		args = append(args, aclArgs(c.opts.Username, c.opts.Password)...)
		args = append(args, "--masterauth", c.opts.Password)
		if c.opts.Username != "" {
			args = append(args, "--masteruser", c.opts.Username)
		}
	}
	n.Redis, err = StartWith(c.dir, Options{Port: port, Args: args, Username: c.opts.Username, Password: c.opts.Password, TLS: c.opts.TLS})
	if err != nil {
		if n.proxy != nil {
			n.proxy.Close()
		}
		return nil, fmt.Errorf("cluster node: %w", err)
	}
	return n, nil
}

// busPort is the node's cluster bus port, from its arguments.
func (n *clusterNode) busPort() int {
	for i, a := range n.opts.Args {
		if a == "--cluster-port" {
			p, _ := strconv.Atoi(n.opts.Args[i+1])
			return p
		}
	}
	return 0
}

// waitNodeReady waits until n reports cluster_state:ok and sees each shard
// with its first master and first replica at their announced addresses.
func (c *Cluster) waitNodeReady(ctx context.Context, n *clusterNode) error {
	rc := n.Client()
	defer rc.Close()
	return pollUntil(ctx, "cluster ready on "+n.Addr(), func(ctx context.Context) error {
		if err := clusterStateOK(ctx, rc); err != nil {
			return err
		}
		slots, err := rc.ClusterSlots(ctx).Result()
		if err != nil {
			return err
		}
		if len(slots) != clusterShards {
			return fmt.Errorf("%d slot ranges", len(slots))
		}
		for i := 0; i < clusterShards; i++ {
			lo, hi := shardSlots(i)
			master, replica := c.nodes[2*i], c.nodes[2*i+1]
			ok := false
			for _, s := range slots {
				ok = ok || s.Start == lo && s.End == hi && len(s.Nodes) == 2 &&
					s.Nodes[0].ID == master.id && s.Nodes[0].Addr == master.addr() &&
					s.Nodes[1].ID == replica.id && s.Nodes[1].Addr == replica.addr()
			}
			if !ok {
				return fmt.Errorf("shard %d not seen as slots %d-%d on %s and %s: %v", i, lo, hi, master.addr(), replica.addr(), slots)
			}
		}
		return nil
	})
}

// shardSlots is the slot range shard i starts with.
func shardSlots(i int) (lo, hi int) {
	return i * 16384 / clusterShards, (i+1)*16384/clusterShards - 1
}

// clusterStateOK is nil when CLUSTER INFO reports cluster_state:ok.
func clusterStateOK(ctx context.Context, c *redis.Client) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			if v != "ok" {
				return fmt.Errorf("%s: cluster_state:%s", c.Options().Addr, v)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: CLUSTER INFO without cluster_state", c.Options().Addr)
}
