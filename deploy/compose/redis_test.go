package compose

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster/internal/credentials"
)

// directive is one Redis setting: "--name a b" on the command line, or the
// line "name a b" of a configuration file.
type directive struct {
	name string
	args []string
}

// directives are a Redis process's settings in the order Redis applies
// them: the configuration file's lines, then the command line's.
type directives []directive

// last is the arguments of the last setting called name (the one Redis
// keeps), and whether there is one.
func (d directives) last(name string) ([]string, bool) {
	for i := len(d) - 1; i >= 0; i-- {
		if strings.EqualFold(d[i].name, name) {
			return d[i].args, true
		}
	}
	return nil, false
}

// value is the one argument of the last setting called name, "" when none.
func (d directives) value(name string) string {
	if a, ok := d.last(name); ok && len(a) == 1 {
		return a[0]
	}
	return ""
}

// sentinel is the arguments of the last "sentinel <sub> ..." setting, and
// whether there is one.
func (d directives) sentinel(sub string) ([]string, bool) {
	for i := len(d) - 1; i >= 0; i-- {
		if strings.EqualFold(d[i].name, "sentinel") && len(d[i].args) > 0 && strings.EqualFold(d[i].args[0], sub) {
			return d[i].args[1:], true
		}
	}
	return nil, false
}

// sentinelOf is the value of "sentinel <sub> <master> <value>", "" when
// there is no such setting for master.
func (d directives) sentinelOf(sub, master string) string {
	for i := len(d) - 1; i >= 0; i-- {
		a := d[i].args
		if strings.EqualFold(d[i].name, "sentinel") && len(a) == 3 && strings.EqualFold(a[0], sub) && a[1] == master {
			return a[2]
		}
	}
	return ""
}

// parseArgs reads redis-server's command-line settings: each "--name"
// followed by its arguments. A bare "--sentinel" (sentinel mode) is kept as
// a setting without arguments.
func parseArgs(args []string) (directives, error) {
	var d directives
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			d = append(d, directive{name: name})
			continue
		}
		if len(d) == 0 {
			return nil, fmt.Errorf("argument %q before any --setting", a)
		}
		d[len(d)-1].args = append(d[len(d)-1].args, a)
	}
	return d, nil
}

// parseConfigFile reads a Redis or Sentinel configuration file: one setting
// a line, # comments, double-quoted arguments (without escapes).
func parseConfigFile(file string) (directives, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var d directives
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var words []string
		for _, w := range strings.Fields(line) {
			if strings.ContainsAny(w, `'\`) {
				return nil, fmt.Errorf("%s:%d: quoting this test does not read: %s", file, n, line)
			}
			words = append(words, strings.Trim(w, `"`))
		}
		d = append(d, directive{name: words[0], args: words[1:]})
	}
	return d, sc.Err()
}

// redisServer is the redis-server command a service runs: its arguments,
// and, when the command is a shell script (sh -c), the files the script
// copies first (destination to source). The script may hold only plain
// words: `[ -f X ] ||`, `cp SRC DST`, and `exec [docker-entrypoint.sh]
// redis-server ...`, separated by ; && or ||.
func (s *composeService) redisServer() (args []string, copies map[string]string, err error) {
	cmd := []string(s.Command)
	if len(cmd) == 0 {
		return nil, nil, fmt.Errorf("no command")
	}
	copies = map[string]string{}
	if cmd[0] == "redis-server" {
		return cmd[1:], copies, nil
	}
	if (cmd[0] != "sh" && cmd[0] != "/bin/sh") || len(cmd) != 3 || cmd[1] != "-c" {
		return nil, nil, fmt.Errorf("command %q: want redis-server ... or sh -c SCRIPT", cmd)
	}
	script := cmd[2]
	if strings.ContainsAny(script, "'\"$`\\") {
		return nil, nil, fmt.Errorf("script %q: quotes, $ and escapes are more shell than this test reads", script)
	}
	for _, sep := range []string{";", "&&", "||"} {
		script = strings.ReplaceAll(script, sep, " ; ")
	}
	var stmts [][]string
	cur := []string{}
	for _, w := range strings.Fields(script) {
		if w == ";" {
			stmts, cur = append(stmts, cur), []string{}
			continue
		}
		cur = append(cur, w)
	}
	stmts = append(stmts, cur)
	found := false
	for _, st := range stmts {
		if len(st) > 0 && st[0] == "exec" {
			st = st[1:]
		}
		if len(st) > 0 && path.Base(st[0]) == "docker-entrypoint.sh" {
			st = st[1:]
		}
		switch {
		case len(st) == 0 || st[0] == "[":
		case st[0] == "cp" && len(st) == 3:
			copies[st[2]] = st[1]
		case st[0] == "redis-server":
			if found {
				return nil, nil, fmt.Errorf("script %q runs redis-server twice", cmd[2])
			}
			args, found = st[1:], true
		default:
			return nil, nil, fmt.Errorf("script %q: this test does not read %q", cmd[2], strings.Join(st, " "))
		}
	}
	if !found {
		return nil, nil, fmt.Errorf("script %q runs no redis-server", cmd[2])
	}
	return args, copies, nil
}

// dataNode is a Redis data node of compose.yaml.
type dataNode struct {
	name      string
	settings  directives // its command line
	port      int        // --tls-port (--port when it has none)
	replicaOf []string   // --replicaof host port, nil for the primary
}

// sentinelNode is a Sentinel of compose.yaml.
type sentinelNode struct {
	name     string
	conf     string     // the configuration file redis-server reads
	template string     // the local file conf is copied from
	settings directives // the template's, then the command line's
	port     int        // tls-port (port when it has none)
}

// listenPort is the port a node's clients reach: tls-port, or port when
// the node has no TLS port (def when neither is set).
func listenPort(d directives, def int) (int, error) {
	for _, name := range []string{"tls-port", "port"} {
		if p := d.value(name); p != "" && p != "0" {
			return strconv.Atoi(p)
		}
	}
	return def, nil
}

// redisSet is the Redis of compose.yaml: the data nodes and the Sentinels.
type redisSet struct {
	nodes     map[string]*dataNode
	sentinels map[string]*sentinelNode
}

// redisSet reads the data nodes' and the Sentinels' settings, failing the
// test when they cannot be read. It checks nothing else.
func (c *composeSpec) redisSet(t *testing.T) *redisSet {
	t.Helper()
	rs := &redisSet{nodes: map[string]*dataNode{}, sentinels: map[string]*sentinelNode{}}
	for _, name := range c.byRole("redis") {
		args, _, err := c.Services[name].redisServer()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(args) > 0 && !strings.HasPrefix(args[0], "--") {
			t.Fatalf("%s: redis-server %s: the data nodes are configured on the command line, which is what this test reads", name, args[0])
		}
		d, err := parseArgs(args)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := &dataNode{name: name, settings: d}
		if n.port, err = listenPort(d, 6379); err != nil {
			t.Fatalf("%s: --tls-port/--port: %v", name, err)
		}
		if r, ok := d.last("replicaof"); ok {
			n.replicaOf = r
		} else if r, ok := d.last("slaveof"); ok {
			n.replicaOf = r
		}
		rs.nodes[name] = n
	}
	for _, name := range c.byRole("sentinel") {
		svc := c.Services[name]
		args, copies, err := svc.redisServer()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(args) == 0 || strings.HasPrefix(args[0], "--") {
			t.Fatalf("%s: redis-server %q: a Sentinel needs a configuration file, its first argument", name, args)
		}
		sn := &sentinelNode{name: name, conf: args[0], port: 26379}
		src := sn.conf
		if from, ok := copies[sn.conf]; ok {
			src = from
		}
		local, ok := svc.mountOf(src)
		if !ok {
			t.Fatalf("%s: %s is not bind-mounted (nor copied from a bind-mounted file)", name, src)
		}
		sn.template = local
		fromFile, err := parseConfigFile(local)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fromArgs, err := parseArgs(args[1:])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sn.settings = append(fromFile, fromArgs...)
		if sn.port, err = listenPort(sn.settings, 26379); err != nil {
			t.Fatalf("%s: tls-port/port: %v", name, err)
		}
		rs.sentinels[name] = sn
	}
	if len(rs.nodes) == 0 || len(rs.sentinels) == 0 {
		t.Fatalf("redis data nodes %v, sentinels %v: want both", c.byRole("redis"), c.byRole("sentinel"))
	}
	return rs
}

// primary is the data node that replicates no other, "" unless exactly one.
func (rs *redisSet) primary() string {
	var p []string
	for name, n := range rs.nodes {
		if n.replicaOf == nil {
			p = append(p, name)
		}
	}
	if len(p) != 1 {
		return ""
	}
	return p[0]
}

// monitor is what the Sentinel monitors: "sentinel monitor NAME HOST PORT
// QUORUM".
type monitor struct {
	master, host string
	port, quorum int
}

func (sn *sentinelNode) monitor() (monitor, error) {
	a, ok := sn.settings.sentinel("monitor")
	if !ok || len(a) != 4 {
		return monitor{}, fmt.Errorf("%s: no `sentinel monitor <name> <host> <port> <quorum>` in %s", sn.name, sn.template)
	}
	port, err1 := strconv.Atoi(a[2])
	quorum, err2 := strconv.Atoi(a[3])
	if err1 != nil || err2 != nil {
		return monitor{}, fmt.Errorf("%s: sentinel monitor %q", sn.name, a)
	}
	return monitor{master: a[0], host: a[1], port: port, quorum: quorum}, nil
}

// master is the name the Sentinels monitor the primary under (the first
// Sentinel's; TestComposeSentinels checks they agree).
func (rs *redisSet) master(t *testing.T) string {
	t.Helper()
	names := sortedKeys(rs.sentinels)
	m, err := rs.sentinels[names[0]].monitor()
	if err != nil {
		t.Fatal(err)
	}
	return m.master
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestComposeRedisDataNodes checks the data nodes: the settings the fleet
// relies on, on every node (any of them may be promoted), TLS only, one set
// of generated users and no password on the command line, one primary that
// the others replicate, and min-replicas-to-write, which bounds how long a
// cut-off primary accepts writes (A in the inequality that timing_test.go
// checks).
func TestComposeRedisDataNodes(t *testing.T) {
	c := loadCompose(t)
	rs := c.redisSet(t)
	if len(rs.nodes) < 3 {
		t.Errorf("%d data nodes: a primary and two replicas, so that losing one node leaves a primary with a replica", len(rs.nodes))
	}
	g := genRedisSecrets(t, rs, rs.master(t))
	for _, name := range sortedKeys(rs.nodes) {
		n, svc := rs.nodes[name], c.Services[name]
		for setting, want := range map[string]string{
			// AOF keeps leases, fences, orders and outcomes across a restart.
			"appendonly": "yes",
			// A lease or an order must never be evicted.
			"maxmemory-policy": "noeviction",
			// Attempt records stay listpack-encoded (see compose.yaml).
			"hash-max-listpack-value": "1024",
		} {
			if got := n.settings.value(setting); got != want {
				t.Errorf("%s: --%s %q, want %q", name, setting, got, want)
			}
		}
		// No password in the committed file: the users (one set for
		// whichever node is the primary) are the generated ACL file, the
		// replication login the generated include.
		for _, setting := range []string{"requirepass", "masterauth", "user"} {
			if _, ok := n.settings.last(setting); ok {
				t.Errorf("%s: --%s on the command line: a secret in the committed compose.yaml (the users are in the generated --aclfile, masterauth in the generated --include)", name, setting)
			}
		}
		g.checkTLS(t, svc, name, n.settings)
		for setting, want := range map[string]string{
			"aclfile": "secrets/redis/users.acl",
			"include": "secrets/redis/node.conf",
		} {
			if src, ok := svc.mountOf(n.settings.value(setting)); !ok || filepath.Clean(src) != want {
				t.Errorf("%s: --%s %q is mounted from %q, want %s (teamster credentials)", name, setting, n.settings.value(setting), src, want)
			}
		}
		// As a replica (now or after a failover) it logs in to the primary
		// as the replication user, with its generated password.
		if inc, ok := g.local(svc, n.settings.value("include")); ok {
			d, err := parseConfigFile(inc)
			repl, _ := g.acl.Principal(credentials.RedisReplication)
			if err != nil || d.value("masteruser") != repl.User || d.value("masterauth") != repl.Password {
				t.Errorf("%s: the included %s does not log a replica in as %s (%v)", name, inc, repl.User, err)
			}
		}
		g.checkHealthcheck(t, svc, name)
		dir := n.settings.value("dir")
		if dir == "" {
			dir = "/data" // the redis image's working directory
		}
		if !c.onVolume(svc, dir) {
			t.Errorf("%s: its dir %s is not on a named volume: the AOF would not survive the container", name, dir)
		}
		toWrite, err := strconv.Atoi(n.settings.value("min-replicas-to-write"))
		switch {
		case err != nil || toWrite < 1:
			t.Errorf("%s: --min-replicas-to-write %q, want at least 1: without it a primary cut off from its replicas accepts writes for as long as the cut lasts", name, n.settings.value("min-replicas-to-write"))
		case toWrite > len(rs.nodes)-1:
			t.Errorf("%s: --min-replicas-to-write %d, but a primary has at most %d replicas", name, toWrite, len(rs.nodes)-1)
		}
		if lag, err := strconv.Atoi(n.settings.value("min-replicas-max-lag")); err != nil || lag < 1 {
			t.Errorf("%s: --min-replicas-max-lag %q, want a number of seconds of at least 1 (0 turns min-replicas-to-write off)", name, n.settings.value("min-replicas-max-lag"))
		}
		// The Sentinels resolve and announce names (sentinel.conf), so
		// every node must announce its own name, not its container IP.
		if got := n.settings.value("replica-announce-ip"); got != name {
			t.Errorf("%s: --replica-announce-ip %q, want its service name %q (the Sentinels announce hostnames)", name, got, name)
		}
	}

	primary := rs.primary()
	if primary == "" {
		t.Fatalf("want exactly one data node without --replicaof (the first primary)")
	}
	for _, name := range sortedKeys(rs.nodes) {
		n := rs.nodes[name]
		if name == primary {
			continue
		}
		want := []string{primary, strconv.Itoa(rs.nodes[primary].port)}
		if d := cmp.Diff(want, n.replicaOf); d != "" {
			t.Errorf("%s: --replicaof (-the primary +got):\n%s", name, d)
		}
	}
}

// TestComposeSentinels checks the Sentinels: each reads a writable copy of
// a read-only template, monitors the primary under one name with a majority
// quorum, speaks TLS only, logs in to the data nodes and to the other
// Sentinels as the generated sentinel user, and lets no one in without a
// generated user of its own (the default user is off), with no secret in
// the committed files.
func TestComposeSentinels(t *testing.T) {
	c := loadCompose(t)
	rs := c.redisSet(t)
	primary := rs.primary()
	if primary == "" {
		t.Fatal("want exactly one data node without --replicaof")
	}
	if len(rs.sentinels) < 3 {
		t.Errorf("%d Sentinels: want at least 3, so that a majority survives the loss of one", len(rs.sentinels))
	}
	master := rs.master(t)
	g := genRedisSecrets(t, rs, master)
	for _, name := range sortedKeys(rs.sentinels) {
		sn, svc := rs.sentinels[name], c.Services[name]
		args, copies, _ := svc.redisServer()
		if !slices.Contains(args, "--sentinel") {
			t.Errorf("%s: redis-server without --sentinel", name)
		}
		// Sentinel rewrites its file: it must be a writable copy, on a
		// named volume (what it learned survives a restart), of a
		// read-only template.
		from, copied := copies[sn.conf]
		if !copied {
			t.Errorf("%s: %s is not copied from a template before redis-server starts; Sentinel rewrites its configuration file", name, sn.conf)
		} else if m, ok := svc.bindAt(from); !ok || !m.ReadOnly {
			t.Errorf("%s: the template %s is not a read-only bind mount", name, from)
		}
		if !c.onVolume(svc, path.Dir(sn.conf)) {
			t.Errorf("%s: %s is not on a named volume", name, sn.conf)
		}
		if _, ok := svc.bindAt(sn.conf); ok {
			t.Errorf("%s: %s is bind-mounted: Sentinel would rewrite the shipped file", name, sn.conf)
		}

		for _, sub := range []string{"resolve-hostnames", "announce-hostnames"} {
			if a, _ := sn.settings.sentinel(sub); len(a) != 1 || a[0] != "yes" {
				t.Errorf("%s: sentinel %s %q, want yes (containers are known by name; their IPs change)", name, sub, a)
			}
		}
		if a, _ := sn.settings.sentinel("announce-ip"); len(a) != 1 || a[0] != name {
			t.Errorf("%s: sentinel announce-ip %q, want its service name", name, a)
		}
		m, err := sn.monitor()
		if err != nil {
			t.Error(err)
			continue
		}
		if m.master != master {
			t.Errorf("%s monitors %q, %s %q: all Sentinels must monitor one master name", name, m.master, sortedKeys(rs.sentinels)[0], master)
		}
		if m.host != primary || m.port != rs.nodes[primary].port {
			t.Errorf("%s: sentinel monitor %s:%d, want the primary %s:%d", name, m.host, m.port, primary, rs.nodes[primary].port)
		}
		if majority := len(rs.sentinels)/2 + 1; m.quorum != majority {
			t.Errorf("%s: quorum %d, want %d of %d Sentinels (a majority: the loss of one does not prevent a failover, and a minority cut off cannot start one)", name, m.quorum, majority, len(rs.sentinels))
		}
		downAfter, err := strconv.Atoi(sn.settings.sentinelOf("down-after-milliseconds", m.master))
		if err != nil || downAfter <= 0 {
			t.Errorf("%s: no sentinel down-after-milliseconds %s (D in the fencing inequality)", name, m.master)
		}
		if ft, err := strconv.Atoi(sn.settings.sentinelOf("failover-timeout", m.master)); err != nil || ft <= downAfter {
			t.Errorf("%s: sentinel failover-timeout %s %q, want one longer than down-after-milliseconds", name, m.master, sn.settings.sentinelOf("failover-timeout", m.master))
		}
		if got := sn.settings.sentinelOf("parallel-syncs", m.master); got != "1" {
			t.Errorf("%s: sentinel parallel-syncs %s %q, want 1", name, m.master, got)
		}

		// No secret in the committed files; the users and the Sentinel's
		// own logins come from the generated include.
		for _, d := range sn.settings {
			if strings.EqualFold(d.name, "requirepass") || strings.EqualFold(d.name, "user") ||
				(strings.EqualFold(d.name, "sentinel") && len(d.args) > 0 && strings.HasSuffix(strings.ToLower(d.args[0]), "-pass")) {
				t.Errorf("%s: %s %s in the committed files: a secret (it belongs in the generated include)", name, d.name, strings.Join(d.args[:min(1, len(d.args))], " "))
			}
		}
		g.checkTLS(t, svc, name, sn.settings)
		inc := sn.settings.value("include")
		if src, ok := svc.mountOf(inc); !ok || filepath.Clean(src) != "secrets/redis/sentinel.conf" {
			t.Errorf("%s: include %q is mounted from %q, want secrets/redis/sentinel.conf (teamster credentials)", name, inc, src)
		} else {
			local, _ := g.local(svc, inc)
			d, err := parseConfigFile(local)
			sentinelUser, _ := g.acl.Principal(credentials.RedisSentinel)
			if err != nil {
				t.Errorf("%s: %v", name, err)
			} else {
				if got := d.sentinelOf("auth-user", m.master); got != sentinelUser.User {
					t.Errorf("%s: sentinel auth-user %s %q, want the generated %s user (the data nodes have no default user)", name, m.master, got, sentinelUser.User)
				}
				if got := d.sentinelOf("auth-pass", m.master); got != sentinelUser.Password {
					t.Errorf("%s: sentinel auth-pass %s is not the generated sentinel user's password", name, m.master)
				}
				if a, _ := d.sentinel("sentinel-user"); len(a) != 1 || a[0] != sentinelUser.User {
					t.Errorf("%s: sentinel sentinel-user %q, want %s: the Sentinels log in to one another", name, a, sentinelUser.User)
				}
				if a, _ := d.sentinel("sentinel-pass"); len(a) != 1 || a[0] != sentinelUser.Password {
					t.Errorf("%s: sentinel sentinel-pass is not the sentinel user's password", name)
				}
				if a, ok := d.last("user"); !ok || len(a) == 0 {
					t.Errorf("%s: the include defines no user", name)
				}
				if a := d.userRules("default"); !slices.Contains(a, "off") {
					t.Errorf("%s: the default user is %q, want off: anyone who reaches a Sentinel could reconfigure the primary", name, a)
				}
			}
		}
		g.checkHealthcheck(t, svc, name)
	}
}
