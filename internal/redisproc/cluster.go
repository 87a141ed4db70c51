package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions shape a Cluster. The zero value is a cluster without
// authentication or TLS and a node timeout of one second.
type ClusterOptions struct {
	// NodeTimeout is cluster-node-timeout; default 1s.
	NodeTimeout time.Duration
	// Username and Password, when Password is set, are the only ACL user
	// of every node (the default user is off): clients and replicas
	// authenticate as it, and MigrateSlots migrates keys as it.
	Username, Password string
	// TLS, when set, makes every node speak TLS only (clients,
	// replication and the cluster bus), with these files. The proxies
	// cannot read TLS, so FreezeReplication then fails.
	TLS *TLS
}

// clusterShards is the number of shards of a Cluster: three masters, the
// fewest that can still elect a replica when one fails.
const clusterShards = 3

// Cluster is a Redis Cluster of three shards, each a master and one
// replica, all redis-server processes on loopback with their files in one
// directory.
//
// Each first master sits behind a Proxy and announces the proxy's port as
// its client port (cluster-announce-port; cluster-announce-bus-port is its
// real bus port), so clients and its replica reach it through the proxy and
// FreezeReplication can keep its writes from the replica. A replica promoted
// by a failover is reached directly: freezing a shard works while its first
// master is its master. Shards are numbered 0 to 2; shard i starts with
// slots i*16384/3 up to (i+1)*16384/3-1.
type Cluster struct {
	dir   string
	opts  ClusterOptions
	nodes []*clusterNode // nodes[2i] is shard i's first master, nodes[2i+1] its first replica

	mu     sync.Mutex
	killed map[int]*killedMaster // by shard
}

// clusterNode is one node of a Cluster.
type clusterNode struct {
	*Redis
	proxy *Proxy // in front of a first master; nil for a first replica
	id    string // its cluster node ID
}

// addr is the client address the node announces: the proxy's, when it has
// one.
func (n *clusterNode) addr() string {
	if n.proxy != nil {
		return n.proxy.Addr()
	}
	return n.Addr()
}

// killedMaster is a master KillMaster killed and the slots it served.
type killedMaster struct {
	node  *clusterNode
	slots []redis.SlotRange
}

// StartCluster starts the six nodes and the three proxies, forms the
// cluster with CLUSTER MEET, ADDSLOTSRANGE and CLUSTER REPLICATE, and
// returns once every node reports cluster_state:ok and sees every shard
// with its master and replica, and every replica is in sync (through its
// master's proxy).
func StartCluster(dir string, opts ClusterOptions) (*Cluster, error) {
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second
	}
	c := &Cluster{dir: dir, opts: opts, killed: map[int]*killedMaster{}}
	if err := c.start(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

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

// SeedAddrs are the client addresses of the six nodes as they announce
// them (a first master's is its proxy's).
func (c *Cluster) SeedAddrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr()
	}
	return addrs
}

// URL is the cluster-mode URL of the cluster, as redis.ParseClusterURL
// reads it: redis://[user:pass@]seed1?addr=seed2&addr=seed3... (rediss://
// with TLS).
func (c *Cluster) URL() string {
	seeds := c.SeedAddrs()
	u := url.URL{Scheme: "redis", Host: seeds[0]}
	if c.opts.TLS != nil {
		u.Scheme = "rediss"
	}
	if c.opts.Password != "" {
		u.User = url.UserPassword(c.opts.Username, c.opts.Password)
	}
	q := make([]string, len(seeds)-1)
	for i, a := range seeds[1:] {
		q[i] = "addr=" + a // host:port as is, for the reader
	}
	u.RawQuery = strings.Join(q, "&")
	return u.String()
}

// Client is a new go-redis cluster client, from URL (and the TLS
// configuration of the cluster's CA); the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	opts, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		panic(fmt.Sprintf("redisproc: the cluster's own URL: %v", err)) // a bug here
	}
	opts.TLSConfig = c.nodes[0].tls
	// As teamster's daemons run it (internal/cmdutil): go-redis reloads
	// the slot map on MOVED, not when a pipeline meets a dead master, so a
	// failover is followed only by the periodic reload.
	opts.ClusterStateReloadInterval = time.Second
	return redis.NewClusterClient(opts)
}

// Proxy is the replication-freezing proxy in front of shard i's first
// master.
func (c *Cluster) Proxy(i int) *Proxy { return c.nodes[2*i].proxy }

// shard is shard i's two nodes; it panics on a shard that does not exist.
func (c *Cluster) shard(i int) [2]*clusterNode {
	if i < 0 || i >= clusterShards {
		panic(fmt.Sprintf("redisproc: no shard %d", i))
	}
	return [2]*clusterNode{c.nodes[2*i], c.nodes[2*i+1]}
}

// master is shard i's running node that answers ROLE as a master.
func (c *Cluster) master(ctx context.Context, i int) (*clusterNode, error) {
	var found *clusterNode
	for _, n := range c.shard(i) {
		if !n.Running() {
			continue
		}
		rc := n.Client()
		r, err := role(ctx, rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("ROLE on %s: %w", n.Addr(), err)
		}
		if r == "master" {
			if found != nil {
				return nil, fmt.Errorf("shard %d has two masters, %s and %s", i, found.Addr(), n.Addr())
			}
			found = n
		}
	}
	if found == nil {
		return nil, fmt.Errorf("shard %d has no running master", i)
	}
	return found, nil
}

// MasterAddr is the address shard i's master announces (its proxy's while
// it is the shard's first master): the running node of the shard that
// answers ROLE as a master.
func (c *Cluster) MasterAddr(ctx context.Context, i int) (string, error) {
	m, err := c.master(ctx, i)
	if err != nil {
		return "", err
	}
	return m.addr(), nil
}

// anyRunning is a client of the first running node; the caller closes it.
func (c *Cluster) anyRunning() (*redis.Client, error) {
	for _, n := range c.nodes {
		if n.Running() {
			return n.Client(), nil
		}
	}
	return nil, errors.New("no node is running")
}

// MasterOf is the address of the master serving slot, as CLUSTER SLOTS on
// a running node reports it.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (string, error) {
	rc, err := c.anyRunning()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d is not served", slot)
}

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

// Close kills every node and closes the proxies. It removes nothing: the
// cluster configuration files and logs stay in dir.
func (c *Cluster) Close() {
	for _, n := range c.nodes {
		_ = n.Kill()
		if n.proxy != nil {
			n.proxy.Close()
		}
	}
}
