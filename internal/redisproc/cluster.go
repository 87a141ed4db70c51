package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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
