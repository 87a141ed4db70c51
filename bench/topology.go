package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// The topology scenario: the 1,024-session throughput row again, on a
// replicated Redis as a deployment runs one, each with a fresh NATS server
// and fleet of its own, after the standalone fleet has stopped (so nothing
// else runs in the process):
//
//   - Redis Sentinel (redisproc.StartSentinelSet): a primary, one replica,
//     three Sentinels; the fleet's clients are go-redis failover clients;
//   - Redis Cluster (redisproc.StartCluster): three masters, each with a
//     replica; the clients are cluster clients reloading the slot map every
//     second.
//
// The router's and the workers' clients come from cmdutil.Common.NewRedis
// with --redis-mode sentinel or cluster, as cmd/router and cmd/worker build
// them. redisproc puts the first primary (Sentinel) and each first master
// (Cluster) behind its replication-freezing Proxy, a goroutine pair per
// connection in this process, which a deployment does not have: its CPU is
// measured (a CPU profile of the window, the proxies' goroutines started
// under a pprof label) and given apart.

// Topology names, as -topologies takes them.
const (
	topoSentinel = "sentinel"
	topoCluster  = "cluster"
)

// topologyTitle is the name of a topology in the rows.
var topologyTitle = map[string]string{
	cmdutil.RedisStandalone: "standalone Redis",
	topoSentinel:            "Redis Sentinel",
	topoCluster:             "Redis Cluster",
}

// topologyLayout describes what a topology runs, for the rows' notes.
var topologyLayout = map[string]string{
	topoSentinel: "1 primary (behind redisproc's in-process proxy), 1 replica, 3 Sentinels (down-after 5 s, failover-timeout 30 s, as deploy/compose), failover clients",
	topoCluster:  "3 masters (each behind redisproc's in-process proxy) + 3 replicas (cluster-node-timeout 5 s), cluster clients reloading the slot map every second",
}

// proxyLabel is the pprof label value of redisproc's proxy goroutines
// (label key "bench").
const proxyLabel = "redisproc-proxy"

// parseTopologies reads -topologies.
func parseTopologies(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case "":
		case topoSentinel, topoCluster:
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		default:
			return nil, fmt.Errorf("-topologies: %q is not sentinel or cluster", p)
		}
	}
	return out, nil
}

// startTopology starts a Sentinel set or a Redis Cluster in dir, its
// proxies' goroutines labelled for the CPU profile.
func startTopology(dir, mode string) (*servers, error) {
	if err := os.MkdirAll(filepath.Join(dir, "redis"), 0o755); err != nil {
		return nil, err
	}
	s := &servers{dir: dir, mode: mode}
	var err error
	// Goroutines inherit the labels of the goroutine that starts them: the
	// proxies' accept loops start here, and their connections' goroutines
	// from those.
	pprof.Do(context.Background(), pprof.Labels("bench", proxyLabel), func(context.Context) {
		switch mode {
		case topoSentinel:
			s.sentinel, err = redisproc.StartSentinelSet(filepath.Join(dir, "redis"), redisproc.SentinelOptions{
				DownAfter: 5 * time.Second, FailoverTimeout: 30 * time.Second})
		case topoCluster:
			s.cluster, err = redisproc.StartCluster(filepath.Join(dir, "redis"), redisproc.ClusterOptions{NodeTimeout: 5 * time.Second})
		default:
			err = fmt.Errorf("topology %q", mode)
		}
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.nodes, err = s.findNodes(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// redisNode is one redis-server process of the servers, by the address its
// clients reach it at (a proxied node's proxy), and its role then.
type redisNode struct {
	addr, role string
}

// Roles of the nodes, in the order the notes give them.
var roleOrder = []string{"redis-server", "primary", "master", "replica", "sentinel"}

// findNodes lists the redis-server processes of a topology.
func (s *servers) findNodes(ctx context.Context) ([]redisNode, error) {
	switch {
	case s.sentinel != nil:
		primary, err := s.sentinel.MasterAddr(ctx)
		if err != nil {
			return nil, err
		}
		nodes := []redisNode{{primary, "primary"}}
		c := redis.NewClient(&redis.Options{Addr: primary})
		info, err := c.Info(ctx, "replication").Result()
		c.Close()
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(info, "\n") {
			// slave0:ip=127.0.0.1,port=6380,state=online,offset=...,lag=0
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(k, "slave") || !strings.Contains(v, "port=") {
				continue
			}
			var ip, port string
			for _, kv := range strings.Split(v, ",") {
				if x, ok := strings.CutPrefix(kv, "ip="); ok {
					ip = x
				}
				if x, ok := strings.CutPrefix(kv, "port="); ok {
					port = x
				}
			}
			nodes = append(nodes, redisNode{ip + ":" + port, "replica"})
		}
		for _, a := range s.sentinel.SentinelAddrs() {
			nodes = append(nodes, redisNode{a, "sentinel"})
		}
		return nodes, nil
	case s.cluster != nil:
		var nodes []redisNode
		for _, a := range s.cluster.SeedAddrs() {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.Info(ctx, "replication").Result()
			c.Close()
			if err != nil {
				return nil, fmt.Errorf("cluster node %s: %w", a, err)
			}
			role := "replica"
			if strings.Contains(info, "role:master") {
				role = "master"
			}
			nodes = append(nodes, redisNode{a, role})
		}
		return nodes, nil
	default:
		return []redisNode{{s.redis.Addr(), "redis-server"}}, nil
	}
}

// redisCPU is the CPU time so far of every redis-server process of the
// servers, by role (INFO cpu of each).
func (s *servers) redisCPU(ctx context.Context) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	var errs []error
	for _, n := range s.nodes {
		c := redis.NewClient(&redis.Options{Addr: n.addr})
		d, err := redisCPU(ctx, c)
		c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", n.role, n.addr, err))
			continue
		}
		out[n.role] += d
	}
	return out, errors.Join(errs...)
}

// roleCount is how many nodes of the servers have role.
func (s *servers) roleCount(role string) int {
	n := 0
	for _, x := range s.nodes {
		if x.role == role {
			n++
		}
	}
	return n
}

// redisRoles describes CPU per attempt of the redis-server processes by
// role, e.g. "primary 120µs, 1 replica 40µs, 3 Sentinels 2µs".
func (s *servers) redisRoles(byRole map[string]time.Duration, per int64) string {
	var parts []string
	for _, role := range roleOrder {
		n := s.roleCount(role)
		if n == 0 {
			continue
		}
		name := role
		switch {
		case role == "sentinel":
			name = fmt.Sprintf("%d Sentinels", n)
		case n > 1:
			name = fmt.Sprintf("%d %ss", n, role)
		}
		parts = append(parts, fmt.Sprintf("%s %s", name, (byRole[role]/time.Duration(max(per, 1))).Round(time.Microsecond)))
	}
	return strings.Join(parts, ", ")
}

// fleetRedis is how the fleet's daemons reach the servers' Redis: as
// cmd/router and cmd/worker do (cmdutil.Common.NewRedis), in the servers'
// mode.
func (s *servers) fleetRedis() cmdutil.Common {
	mode := s.mode
	if mode == "" {
		mode = cmdutil.RedisStandalone
	}
	return cmdutil.Common{RedisURL: s.redisURL(), RedisMode: mode}
}

// newFleetRedis is a Redis client of the servers built as cmd/router and
// cmd/worker build theirs (fleetRedis), with the round-trip counters of
// instrument.
func (s *servers) newFleetRedis(rt, issued *rtCounter) (redis.UniversalClient, error) {
	settings := s.fleetRedis()
	rdb, err := settings.NewRedis()
	if err != nil {
		return nil, err
	}
	if err := instrument(rt, issued)(rdb); err != nil {
		rdb.Close()
		return nil, err
	}
	return rdb, nil
}

// instrument puts the round-trip counter rt on a fleet's Redis client. A
// cluster client's own hooks see each command and each pipeline once,
// before it is split by node; its node clients' hooks see what each node is
// sent. So rt goes on every node client (OnNewNode, before the first
// command creates any): a pipeline split over three masters is three round
// trips, sent in parallel, as is each redirected retry; the slot map reload
// (CLUSTER SLOTS, once a second per client) is a round trip of its own.
// issued, when set, goes on the cluster client itself: round trips as the
// callers issue them.
func instrument(rt, issued *rtCounter) func(redis.UniversalClient) error {
	return func(rdb redis.UniversalClient) error {
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			c.OnNewNode(func(node *redis.Client) { node.AddHook(rt) })
			if issued != nil {
				c.AddHook(issued)
			}
		case *redis.Client:
			c.AddHook(rt)
		default:
			return fmt.Errorf("cmdutil.NewRedis returned a %T", rdb)
		}
		return nil
	}
}

// primaries is a description of the topology's primaries now (the
// Sentinels' primary, the cluster's masters), to tell whether one failed
// over during a window.
func (s *servers) primaries(ctx context.Context) string {
	switch {
	case s.sentinel != nil:
		a, err := s.sentinel.MasterAddr(ctx)
		if err != nil {
			return "unknown: " + err.Error()
		}
		return a
	case s.cluster != nil:
		var as []string
		for i := 0; i < 3; i++ {
			a, err := s.cluster.MasterAddr(ctx, i)
			if err != nil {
				return "unknown: " + err.Error()
			}
			as = append(as, a)
		}
		return strings.Join(as, ",")
	}
	return ""
}

// topologyRun is what a topology's throughput window adds to its row.
type topologyRun struct {
	mode       string
	srv        *servers
	proxyShare float64       // of this process's CPU in the window, the share of redisproc's proxies (-1: not measured)
	proxyCPU   time.Duration // that share of the window's process CPU
	issued     int64         // round trips as the cluster client's callers issued them (cluster only)
	failover   string        // set when a primary changed during the window
	redisByRl  map[string]time.Duration
}

// measureTopology runs the throughput row at `sessions` on a fresh fleet
// (router, 2 workers with `slots` slots each, probe worker) over a fresh
// NATS server and the topology, then stops all of it. The window's CPU
// profile, in dir, measures the proxies.
func measureTopology(ctx context.Context, dir, mode string, sessions, slots int, warm, window time.Duration) (Row, error) {
	progress("topology %s: starting %s", mode, topologyLayout[mode])
	t0 := time.Now()
	srv, err := startTopology(filepath.Join(dir, mode), mode)
	if err != nil {
		return Row{}, fmt.Errorf("%s: %w", topologyTitle[mode], err)
	}
	defer srv.close()
	progress("topology %s: up in %s; starting NATS and the fleet", mode, time.Since(t0).Round(time.Millisecond))
	if err := srv.startNATS(); err != nil {
		return Row{}, err
	}
	f, err := startFleet(ctx, srv, 2, slots)
	if err != nil {
		return Row{}, fmt.Errorf("%s: %w", topologyTitle[mode], err)
	}
	defer f.close()
	before := srv.primaries(ctx)
	profile := filepath.Join(dir, mode+".pprof")
	tr, err := measureThroughput(ctx, f, 0, sessions, warm, window, profile)
	if err != nil {
		return Row{}, fmt.Errorf("%s: %w", topologyTitle[mode], err)
	}
	topo := &topologyRun{mode: mode, srv: srv, redisByRl: tr.w.redisByRole, issued: tr.issued, proxyShare: -1}
	if after := srv.primaries(ctx); after != before {
		topo.failover = fmt.Sprintf("the primaries changed during the window (%s, then %s)", before, after)
	}
	labelled, total, err := labelCPU(profile, "bench", proxyLabel)
	if err != nil {
		progress("topology %s: reading the window's profile: %v", mode, err)
	} else if total > 0 {
		// The profile samples; its share scales the measured CPU.
		topo.proxyShare = float64(labelled) / float64(total)
		topo.proxyCPU = time.Duration(topo.proxyShare * float64(tr.w.cpu))
	}
	tr.topology = topo
	return tr.row(), nil
}

// topologyNote is what a topology row's note says beside the standalone
// row's: the layout, the proxies' share of the process's CPU, the Redis
// CPU by role, a cluster's issued round trips.
func (t *topologyRun) note(completed int64) string {
	n := max(completed, 1)
	s := topologyTitle[t.mode] + ": " + topologyLayout[t.mode] + "; clients from cmdutil.Common.NewRedis --redis-mode " + t.mode +
		" as the daemons build them; a fresh NATS server and fleet, started after the standalone fleet stopped"
	if t.proxyShare >= 0 {
		s += fmt.Sprintf("; of this process's CPU per attempt, %s (%.0f%%) was redisproc's proxies (by a CPU profile of the window), which a deployment does not run",
			(t.proxyCPU / time.Duration(n)).Round(time.Microsecond), 100*t.proxyShare)
	}
	s += "; redis-server CPU per attempt by role: " + t.srv.redisRoles(t.redisByRl, n)
	if t.mode == topoCluster {
		s += fmt.Sprintf("; round trips are counted per node: a pipeline split over 3 masters is 3 (sent in parallel); as the callers issued them (each pipeline once) %.2f per attempt",
			float64(t.issued)/float64(n))
	}
	if t.failover != "" {
		s += "; WARNING: " + t.failover
	}
	return s
}

// labelCPU reads a CPU profile as runtime/pprof writes it and returns the
// CPU of the samples labelled key=value and of all samples.
func labelCPU(path, key, value string) (labelled, total time.Duration, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return 0, 0, err
	}
	cpu := -1 // the value in nanoseconds of CPU
	for i, t := range p.SampleType {
		if t.Type == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return 0, 0, errors.New("no cpu sample type in the profile")
	}
	for _, s := range p.Sample {
		v := time.Duration(s.Value[cpu])
		total += v
		if slices.Contains(s.Label[key], value) {
			labelled += v
		}
	}
	return labelled, total, nil
}
