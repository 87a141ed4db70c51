package compose

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/redisproc"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

// TestShippedRedisFailover runs compose.yaml's Redis as real redis-server
// processes on loopback: the data nodes with their shipped command lines,
// the Sentinels with the shipped sentinel.conf and their command lines, only
// the host names and ports mapped to 127.0.0.1 and free ports. A daemon's
// TEAMSTER_REDIS_URL, read by redis.ParseFailoverURL and with its Sentinels'
// addresses mapped the same way, reaches the primary. Then it measures the
// two failover terms of the fencing inequality that the settings decide
// (timing_test.go computes their bounds):
//
//   - A: with both replicas frozen (SIGSTOP: the primary is cut off from
//     them), the primary refuses writes within min-replicas-max-lag + 2 s;
//   - D: with the primary frozen (cut off alive), no replica is promoted
//     before down-after-milliseconds; and writes through the daemon's URL
//     go to the promoted replica.
//
// Last, the old primary, resumed, is turned into a replica by the Sentinels.
func TestShippedRedisFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover with the shipped timings takes about 20 s")
	}
	c := loadCompose(t)
	rs := c.redisSet(t)
	primary, master := rs.primary(), rs.master(t)
	if primary == "" {
		t.Fatal("no single primary")
	}
	var replicas []string
	for _, name := range sortedKeys(rs.nodes) {
		if name != primary {
			replicas = append(replicas, name)
		}
	}
	password := rs.nodes[primary].password
	anySentinel := rs.sentinels[sortedKeys(rs.sentinels)[0]]
	downAfterMs, err := strconv.Atoi(anySentinel.settings.sentinelOf("down-after-milliseconds", master))
	if err != nil {
		t.Fatal("no down-after-milliseconds")
	}
	downAfter := time.Duration(downAfterMs) * time.Millisecond
	maxLag, err := strconv.Atoi(rs.nodes[primary].settings.value("min-replicas-max-lag"))
	if err != nil {
		t.Fatal("no min-replicas-max-lag")
	}
	aBound := time.Duration(maxLag)*time.Second + 2*time.Second

	// A free loopback port for every data node and Sentinel.
	ports := map[string]int{}
	for _, name := range append(sortedKeys(rs.nodes), sortedKeys(rs.sentinels)...) {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[name] = p
	}
	dir := t.TempDir()
	procs := map[string]*redisproc.Redis{}
	direct := map[string]*redis.Client{}
	for _, name := range append([]string{primary}, replicas...) {
		procs[name] = startRedis(t, dir, redisproc.Options{Port: ports[name], Password: password,
			Args: loopbackDataArgs(t, rs.nodes[name], ports, filepath.Join(dir, name))})
		direct[name] = redis.NewClient(&redis.Options{Addr: loopback(ports[name]), Password: password, MaxRetries: -1,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { direct[name].Close() })
	}
	ctx := context.Background()
	role := func(name string) string {
		v, err := direct[name].Do(ctx, "ROLE").Slice()
		if err != nil || len(v) == 0 {
			return ""
		}
		s, _ := v[0].(string)
		return s
	}
	linked := func(name string) bool {
		info, err := direct[name].Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}
	for _, r := range replicas {
		waitUntil(t, r+" replicates "+primary, func() bool { return linked(r) })
	}

	for _, name := range sortedKeys(rs.sentinels) {
		conf := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(conf, []byte(loopbackSentinelConf(t, rs.sentinels[name], ports, dir)), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[name] = startRedis(t, dir, redisproc.Options{Port: ports[name], Password: rs.sentinels[name].password,
			ConfigFile: conf, Sentinel: true})
	}
	for _, name := range sortedKeys(rs.sentinels) {
		sc := redis.NewSentinelClient(&redis.Options{Addr: loopback(ports[name]), Password: rs.sentinels[name].password, MaxRetries: -1})
		t.Cleanup(func() { sc.Close() })
		waitUntil(t, name+" knows the replicas and the other Sentinels and has a quorum", func() bool {
			reps, err1 := sc.Replicas(ctx, master).Result()
			peers, err2 := sc.Sentinels(ctx, master).Result()
			ok, err3 := sc.CkQuorum(ctx, master).Result()
			return err1 == nil && err2 == nil && err3 == nil && len(reps) == len(replicas) && len(peers) == len(rs.sentinels)-1 && strings.HasPrefix(ok, "OK")
		})
	}

	// A daemon's URL, with its Sentinels on loopback.
	daemon := c.byRole("router")[0]
	opts, err := redis.ParseFailoverURL(c.Services[daemon].Environment["TEAMSTER_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range opts.SentinelAddrs {
		host, _, _ := net.SplitHostPort(a)
		opts.SentinelAddrs[i] = loopback(ports[host])
	}
	rdb := redis.NewFailoverClient(opts)
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Set(ctx, "teamster:test", "before", 0).Err(); err != nil {
		t.Fatalf("%s's TEAMSTER_REDIS_URL does not reach the primary through the Sentinels: %v", daemon, err)
	}

	// A: the primary cut off from both replicas stops accepting writes.
	cut := time.Now()
	for _, r := range replicas {
		pause(t, procs[r])
	}
	var refused time.Duration
	for i := 0; ; i++ {
		err := rdb.Set(ctx, "teamster:test", i, 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "NOREPLICAS") {
			refused = time.Since(cut)
			break
		}
		if err != nil {
			t.Fatalf("a write with the replicas frozen: %v, want OK or NOREPLICAS", err)
		}
		if time.Since(cut) > waitFor {
			t.Fatalf("the primary still accepts writes %s after its replicas froze", waitFor)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, r := range replicas {
		resume(t, procs[r])
	}
	t.Logf("A: the primary refused writes %.3f s after its replicas froze (bound min-replicas-max-lag + 2 s = %s)", refused.Seconds(), aBound)
	if refused > aBound+300*time.Millisecond {
		t.Errorf("A: the primary accepted writes for %s with its replicas frozen, over min-replicas-max-lag + 2 s = %s", refused, aBound)
	}
	waitUntil(t, "writes are accepted again once the replicas run", func() bool { return rdb.Set(ctx, "teamster:test", "A", 0).Err() == nil })
	for _, r := range replicas {
		waitUntil(t, r+" replicates again", func() bool { return linked(r) })
	}

	// D: the primary cut off alive (frozen: it answers no one) is replaced
	// no sooner than down-after-milliseconds. Meanwhile, a daemon's view:
	// writes through its URL one after another, each bounded at 10 s as a
	// router bounds a submit's Redis work.
	type write struct {
		start, end time.Time
		err        error
	}
	writes := make(chan write, 1000)
	stopWriting := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopWriting) }) }
	t.Cleanup(stop) // when the test fails before it stops the writes
	go func() {
		defer close(writes)
		for i := 0; ; i++ {
			select {
			case <-stopWriting:
				return
			default:
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			w := write{start: time.Now()}
			w.err = rdb.Set(wctx, "teamster:w", i, 0).Err()
			w.end = time.Now()
			cancel()
			select {
			case writes <- w:
			case <-stopWriting:
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	cut = time.Now()
	pause(t, procs[primary])
	var promoted string
	waitUntil(t, "a replica is promoted", func() bool {
		for _, r := range replicas {
			if role(r) == "master" {
				promoted = r
				return true
			}
		}
		return false
	})
	d := time.Since(cut)
	waitUntil(t, daemon+"'s URL writes to the promoted replica", func() bool { return rdb.Set(ctx, "teamster:test", "D", 0).Err() == nil })
	stop()
	var longest time.Duration
	var failed []string
	for w := range writes {
		longest = max(longest, w.end.Sub(w.start))
		if w.err != nil {
			failed = append(failed, fmt.Sprintf("%+.3f s: %v", w.start.Sub(cut).Seconds(), w.err))
		}
	}
	t.Logf("D: %s promoted %.3f s after the primary froze (down-after-milliseconds %s)", promoted, d.Seconds(), downAfter)
	t.Logf("writes through %s's URL, back to back: the longest took %.3f s; %d failed %q", daemon, longest.Seconds(), len(failed), failed)
	if d < downAfter-100*time.Millisecond {
		t.Errorf("D: %s was promoted %s after the primary froze, before down-after-milliseconds (%s)", promoted, d, downAfter)
	}
	if got, err := direct[promoted].Get(ctx, "teamster:test").Result(); err != nil || got != "D" {
		t.Errorf("the promoted %s has %q, %v, want the write made through the URL", promoted, got, err)
	}

	// The old primary runs again: the Sentinels make it a replica of the
	// new one. Meanwhile it should refuse writes, having no replica left
	// (logged, not asserted: the order in which it learns that is Redis's).
	resume(t, procs[primary])
	t.Logf("the old primary, running again, answers a write with: %v", direct[primary].Set(ctx, "teamster:test", "stale", 0).Err())
	waitUntil(t, "the Sentinels turn the old primary into a replica", func() bool { return role(primary) == "slave" && linked(primary) })
	if got, err := direct[primary].Get(ctx, "teamster:test").Result(); err != nil || got != "D" {
		t.Errorf("the old primary, now a replica, has %q, %v, want the new primary's value", got, err)
	}
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// loopbackDataArgs is a data node's shipped command line with the other
// nodes' names mapped to their loopback ports, listening on its own and
// keeping its files in dir.
func loopbackDataArgs(t *testing.T, n *dataNode, ports map[string]int, dir string) []string {
	t.Helper()
	var args []string
	for _, d := range n.settings {
		a := d.args
		switch strings.ToLower(d.name) {
		case "port", "bind", "dir":
			continue
		case "replicaof", "slaveof":
			p, ok := ports[a[0]]
			if !ok || len(a) != 2 {
				t.Fatalf("%s: --%s %q: not a data node", n.name, d.name, a)
			}
			a = []string{"127.0.0.1", strconv.Itoa(p)}
		case "replica-announce-ip", "slave-announce-ip":
			a = []string{"127.0.0.1"}
		}
		args = append(append(args, "--"+d.name), a...)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return append(args, "--port", strconv.Itoa(ports[n.name]), "--bind", "127.0.0.1", "--dir", dir)
}

// loopbackSentinelConf is a Sentinel's shipped configuration (template and
// command line) with the names mapped to their loopback ports.
func loopbackSentinelConf(t *testing.T, sn *sentinelNode, ports map[string]int, dir string) string {
	t.Helper()
	lines := []string{"port " + strconv.Itoa(ports[sn.name]), "bind 127.0.0.1", "dir " + dir}
	for _, d := range sn.settings {
		a := append([]string(nil), d.args...)
		switch strings.ToLower(d.name) {
		case "port", "bind", "dir":
			continue
		case "sentinel":
			switch {
			case len(a) == 0: // --sentinel: the mode, given on the command line
				continue
			case a[0] == "monitor" && len(a) == 5:
				p, ok := ports[a[2]]
				if !ok {
					t.Fatalf("%s: sentinel monitor %s: not a data node", sn.name, a[2])
				}
				a[2], a[3] = "127.0.0.1", strconv.Itoa(p)
			case a[0] == "announce-ip" && len(a) == 2:
				a[1] = "127.0.0.1"
			}
		}
		lines = append(lines, strings.Join(append([]string{d.name}, a...), " "))
	}
	return strings.Join(lines, "\n") + "\n"
}

// startRedis starts a data node or a Sentinel with internal/redisproc; it
// is killed when the test ends.
func startRedis(t *testing.T, dir string, o redisproc.Options) *redisproc.Redis {
	t.Helper()
	r, err := redisproc.StartWith(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	return r
}

func pause(t *testing.T, r *redisproc.Redis) {
	t.Helper()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
}

func resume(t *testing.T, r *redisproc.Redis) {
	t.Helper()
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
}
