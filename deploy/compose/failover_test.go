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

	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/credentials"
	"github.com/teamster-fleet/teamster/internal/redisproc"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

// TestShippedRedisFailover runs compose.yaml's Redis as real redis-server
// processes on loopback: the data nodes with their shipped command lines,
// the Sentinels with the shipped sentinel.conf and their command lines, only
// the host names and ports mapped to 127.0.0.1 and free ports, and the
// mounted secrets to credentials generated for the test (internal/credentials:
// the CA, each node's certificate, the ACL users; one test-only admin user
// is added to the generated ACL files, for the test's own inspection). So
// everything speaks TLS, replicas log in as the replication user, Sentinels
// as the sentinel user. A router's shipped TEAMSTER_REDIS_URL, its
// Sentinels' addresses mapped the same way, read by internal/cmdutil in
// sentinel mode with the CA and the router role's generated password file,
// reaches the primary. At the
// end, no server refused any of the shipped users anything (ACL LOG). Then
// it measures the
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
	g := genRedisSecrets(t, rs, master)
	const adminUser, adminPass = "test-admin", "test-admin-password"
	for _, f := range []string{g.acl.ACLFile, g.acl.SentinelConf} {
		appendLine(t, f, "user "+adminUser+" on >"+adminPass+" ~* &* +@all")
	}
	tlsCfg, err := (&redisproc.TLS{CAFile: g.ca.CertFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	serverTLS := func(name string) *redisproc.TLS {
		return &redisproc.TLS{CAFile: g.ca.CertFile, CertFile: filepath.Join(g.root, "tls", name+".pem"), KeyFile: filepath.Join(g.root, "tls", name+"-key.pem")}
	}
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
		procs[name] = startRedis(t, dir, redisproc.Options{Port: ports[name], Username: adminUser, Password: adminPass, TLS: serverTLS(name),
			Args: loopbackDataArgs(t, rs.nodes[name], c.Services[name], g, ports, filepath.Join(dir, name))})
		direct[name] = redis.NewClient(&redis.Options{Addr: loopback(ports[name]), Username: adminUser, Password: adminPass, TLSConfig: tlsCfg, MaxRetries: -1,
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
		if err := os.WriteFile(conf, []byte(loopbackSentinelConf(t, rs.sentinels[name], c.Services[name], g, ports, dir)), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[name] = startRedis(t, dir, redisproc.Options{Port: ports[name], Username: adminUser, Password: adminPass, TLS: serverTLS(name),
			ConfigFile: conf, Sentinel: true})
	}
	sentinels := map[string]*redis.SentinelClient{}
	for _, name := range sortedKeys(rs.sentinels) {
		sc := redis.NewSentinelClient(&redis.Options{Addr: loopback(ports[name]), Username: adminUser, Password: adminPass, TLSConfig: tlsCfg, MaxRetries: -1})
		sentinels[name] = sc
		t.Cleanup(func() { sc.Close() })
		waitUntil(t, name+" knows the replicas and the other Sentinels and has a quorum", func() bool {
			reps, err1 := sc.Replicas(ctx, master).Result()
			peers, err2 := sc.Sentinels(ctx, master).Result()
			ok, err3 := sc.CkQuorum(ctx, master).Result()
			return err1 == nil && err2 == nil && err3 == nil && len(reps) == len(replicas) && len(peers) == len(rs.sentinels)-1 && strings.HasPrefix(ok, "OK")
		})
	}

	// A router's shipped Redis settings, its Sentinels mapped to loopback,
	// read as the router reads them: its URL, the generated password file
	// of its role, the CA.
	daemon := c.byRole("router")[0]
	daemonURL := c.Services[daemon].Environment["TEAMSTER_REDIS_URL"]
	for _, name := range sortedKeys(rs.sentinels) {
		daemonURL = strings.ReplaceAll(daemonURL, net.JoinHostPort(name, strconv.Itoa(rs.sentinels[name].port)), loopback(ports[name]))
	}
	common := cmdutil.Common{RedisURL: daemonURL, RedisMode: cmdutil.RedisSentinel, RedisCA: g.ca.CertFile,
		RedisPasswordFile: g.acl.DaemonPasswordFile(credentials.RedisRouter)}
	rdb, err := common.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Set(ctx, testKey, "before", 0).Err(); err != nil {
		t.Fatalf("%s's TEAMSTER_REDIS_URL does not reach the primary through the Sentinels: %v", daemon, err)
	}

	// A: the primary cut off from both replicas stops accepting writes.
	cut := time.Now()
	for _, r := range replicas {
		pause(t, procs[r])
	}
	var refused time.Duration
	for i := 0; ; i++ {
		err := rdb.Set(ctx, testKey, i, 0).Err()
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
	waitUntil(t, "writes are accepted again once the replicas run", func() bool { return rdb.Set(ctx, testKey, "A", 0).Err() == nil })
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
			w.err = rdb.Set(wctx, testKeyW, i, 0).Err()
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
	waitUntil(t, daemon+"'s URL writes to the promoted replica", func() bool { return rdb.Set(ctx, testKey, "D", 0).Err() == nil })
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
	if got, err := direct[promoted].Get(ctx, testKey).Result(); err != nil || got != "D" {
		t.Errorf("the promoted %s has %q, %v, want the write made through the URL", promoted, got, err)
	}

	// The old primary runs again: the Sentinels make it a replica of the
	// new one. Meanwhile it should refuse writes, having no replica left
	// (logged, not asserted: the order in which it learns that is Redis's).
	resume(t, procs[primary])
	t.Logf("the old primary, running again, answers a write with: %v", direct[primary].Set(ctx, testKey, "stale", 0).Err())
	waitUntil(t, "the Sentinels turn the old primary into a replica", func() bool { return role(primary) == "slave" && linked(primary) })
	if got, err := direct[primary].Get(ctx, testKey).Result(); err != nil || got != "D" {
		t.Errorf("the old primary, now a replica, has %q, %v, want the new primary's value", got, err)
	}

	// Through all of it (replication, monitoring, the failover, the
	// reconfiguration, the router's writes) no server refused a shipped
	// user anything.
	for _, name := range append(sortedKeys(rs.nodes), sortedKeys(rs.sentinels)...) {
		var do func(args ...any) *redis.Cmd
		if sc, ok := sentinels[name]; ok {
			do = func(args ...any) *redis.Cmd { cmd := redis.NewCmd(ctx, args...); _ = sc.Process(ctx, cmd); return cmd }
		} else {
			do = func(args ...any) *redis.Cmd { return direct[name].Do(ctx, args...) }
		}
		log := do("ACL", "LOG")
		for try := 0; log.Err() != nil && try < 20; try++ { // a connection the pause broke
			time.Sleep(50 * time.Millisecond)
			log = do("ACL", "LOG")
		}
		denied, err := redisproc.ACLDenials(log)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, d := range denied {
			t.Errorf("%s refused %s", name, d)
		}
	}
}

// The keys the test writes through the router's URL: under the router's
// key patterns (a session's teamster:{...}: keys).
const (
	testKey  = "teamster:{failover-test}:v"
	testKeyW = "teamster:{failover-test}:w"
)

func appendLine(t *testing.T, file, line string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

// secretSettings are the settings that name a mounted secret file.
var secretSettings = map[string]bool{"tls-cert-file": true, "tls-key-file": true, "tls-ca-cert-file": true, "aclfile": true, "include": true}

// localSecret maps a setting's mounted file to the test's generated one.
func localSecret(t *testing.T, node string, svc *composeService, g *redisSecrets, setting string, args []string) []string {
	t.Helper()
	if len(args) != 1 {
		t.Fatalf("%s: %s %q: want one file", node, setting, args)
	}
	local, ok := g.local(svc, args[0])
	if !ok {
		t.Fatalf("%s: %s %s is not bind-mounted", node, setting, args[0])
	}
	return []string{local}
}

// listen are the settings of a node listening on port: TLS only when its
// shipped settings have a tls-port.
func listen(d directives, port int) [][2]string {
	if d.value("tls-port") != "" {
		return [][2]string{{"port", "0"}, {"tls-port", strconv.Itoa(port)}}
	}
	return [][2]string{{"port", strconv.Itoa(port)}}
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// loopbackDataArgs is a data node's shipped command line with the other
// nodes' names mapped to their loopback ports, the mounted secrets to the
// generated ones, listening on its own port and keeping its files in dir.
func loopbackDataArgs(t *testing.T, n *dataNode, svc *composeService, g *redisSecrets, ports map[string]int, dir string) []string {
	t.Helper()
	var args []string
	for _, d := range n.settings {
		a := d.args
		switch name := strings.ToLower(d.name); {
		case name == "port" || name == "tls-port" || name == "bind" || name == "dir":
			continue
		case secretSettings[name]:
			a = localSecret(t, n.name, svc, g, name, a)
		case name == "replicaof" || name == "slaveof":
			p, ok := ports[a[0]]
			if !ok || len(a) != 2 {
				t.Fatalf("%s: --%s %q: not a data node", n.name, d.name, a)
			}
			a = []string{"127.0.0.1", strconv.Itoa(p)}
		case name == "replica-announce-ip" || name == "slave-announce-ip":
			a = []string{"127.0.0.1"}
		}
		args = append(append(args, "--"+d.name), a...)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range listen(n.settings, ports[n.name]) {
		args = append(args, "--"+l[0], l[1])
	}
	return append(args, "--bind", "127.0.0.1", "--dir", dir)
}

// loopbackSentinelConf is a Sentinel's shipped configuration (template and
// command line) with the names mapped to their loopback ports and the
// mounted secrets to the generated ones.
func loopbackSentinelConf(t *testing.T, sn *sentinelNode, svc *composeService, g *redisSecrets, ports map[string]int, dir string) string {
	t.Helper()
	lines := []string{"bind 127.0.0.1", "dir " + dir}
	for _, l := range listen(sn.settings, ports[sn.name]) {
		lines = append(lines, l[0]+" "+l[1])
	}
	for _, d := range sn.settings {
		a := append([]string(nil), d.args...)
		switch name := strings.ToLower(d.name); {
		case name == "port" || name == "tls-port" || name == "bind" || name == "dir":
			continue
		case secretSettings[name]:
			a = localSecret(t, sn.name, svc, g, name, a)
		case name == "sentinel":
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
