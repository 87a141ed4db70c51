package credentials

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/redisproc"
	"github.com/teamster-fleet/teamster/leases"
)

const testMaster = "teamster"

// redisCreds generates a CA, a certificate for 127.0.0.1 and the ACL files
// into dir.
type redisCreds struct {
	ca        *CA
	cert, key string
	acl       *RedisACL
}

func genRedis(t *testing.T, dir string) *redisCreds {
	t.Helper()
	ca, err := EnsureCA(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.EnsureServer(filepath.Join(dir, "tls"), "redis", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	acl, err := EnsureRedisACL(filepath.Join(dir, "redis"), testMaster, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &redisCreds{ca: ca, cert: cert, key: key, acl: acl}
}

func (c *redisCreds) tls() *redisproc.TLS {
	return &redisproc.TLS{CAFile: c.ca.CertFile, CertFile: c.cert, KeyFile: c.key}
}

func (c *redisCreds) principal(t *testing.T, r RedisRole) RedisPrincipal {
	t.Helper()
	p, ok := c.acl.Principal(r)
	if !ok {
		t.Fatalf("no %s principal", r)
	}
	return p
}

// startNode starts a TLS-only data node with aclFile and the generated
// node.conf included; the start-up check logs in as healthcheck.
func startNode(t *testing.T, dir string, c *redisCreds, aclFile string, args ...string) *redisproc.Redis {
	t.Helper()
	hc := c.principal(t, RedisHealthcheck)
	r, err := redisproc.StartWith(dir, redisproc.Options{
		Username: hc.User, Password: hc.Password, TLS: c.tls(),
		Args: append([]string{"--aclfile", aclFile, "--include", c.acl.NodeConf}, args...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	return r
}

// connectAs connects through the project's own client code, as a daemon
// does: a rediss:// URL and --redis-tls-ca.
func connectAs(t *testing.T, c *redisCreds, url, mode string) redis.UniversalClient {
	t.Helper()
	common := cmdutil.Common{RedisURL: url, RedisMode: mode, RedisCA: c.ca.CertFile}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, err := common.Redis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func admin(t *testing.T, c *redisCreds, r *redisproc.Redis) *redis.Client {
	t.Helper()
	cfg, err := c.tls().ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	p := c.principal(t, RedisAdmin)
	a := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: p.User, Password: p.Password, TLSConfig: cfg})
	t.Cleanup(func() { a.Close() })
	return a
}

// denials are the ACL LOG entries of the server: every command a user was
// refused, with the user and the command or key.
func denials(t *testing.T, ctx context.Context, a *redis.Client) []string {
	t.Helper()
	d, err := redisproc.ACLDenials(a.Do(ctx, "ACL", "LOG"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// probe is one operation a role must not be able to run.
type probe struct {
	name string
	args []any
}

// forbiddenFor are the probes of role: what no role may do, and what this
// role's neighbours may do but it may not.
func forbiddenFor(role RedisRole) []probe {
	ps := []probe{
		{"FLUSHALL", []any{"flushall"}},
		{"FLUSHDB", []any{"flushdb"}},
		{"CONFIG SET", []any{"config", "set", "maxmemory-policy", "noeviction"}},
		{"CONFIG GET", []any{"config", "get", "requirepass"}},
		{"KEYS *", []any{"keys", "*"}},
		{"SCAN", []any{"scan", "0"}},
		{"ACL LIST", []any{"acl", "list"}},
		{"CLIENT LIST", []any{"client", "list"}},
		{"MODULE LIST", []any{"module", "list"}},
		{"SET outside teamster:", []any{"set", "other:key", "x"}},
		{"GET outside teamster:", []any{"get", "other:key"}},
		{"a script writing outside teamster:", []any{"eval", "return redis.call('SET', KEYS[1], 'x')", "1", "other:key"}},
		{"a script writing an undeclared key", []any{"eval", "return redis.call('SET', 'other:key', 'x')", "0"}},
		{"PUBLISH", []any{"publish", "teamster", "x"}},
	}
	if role != RedisSentinel { // a Sentinel reconfigures replicas
		ps = append(ps, probe{"REPLICAOF", []any{"replicaof", "no", "one"}})
	}
	switch role {
	case RedisRouter:
		ps = append(ps, probe{"SET teamster:x (not a teamster key layout)", []any{"set", "teamster:x", "x"}})
	case RedisWorker:
		ps = append(ps,
			probe{"SET an attempt id", []any{"set", "teamster:attemptid:{a}", "x"}},
			probe{"write a source", []any{"hset", "teamster:source:{s}", "generation", "9"}},
			probe{"a script writing a source", []any{"eval", "return redis.call('HSET', KEYS[1], 'revoked', '1')", "1", "teamster:source:{s}"}},
			probe{"RPUSH an order (accepting is the router's)", []any{"rpush", "teamster:{t}:order", "x"}})
	case RedisOperator:
		ps = append(ps,
			probe{"SET", []any{"set", "teamster:attemptid:{a}", "x"}},
			probe{"HSET a session", []any{"hset", "teamster:{t}:session", "f", "v"}},
			probe{"DEL a lease", []any{"del", "teamster:{t}:lease"}},
			probe{"ZADD the index", []any{"zadd", "teamster:{reaper-0}:due", "1", "x"}},
			probe{"EVAL", []any{"eval", "return 1", "0"}},
			probe{"SCRIPT LOAD", []any{"script", "load", "return 1"}})
	case RedisReplication, RedisSentinel, RedisHealthcheck:
		ps = append(ps,
			probe{"GET teamster:", []any{"get", "teamster:attemptid:{a}"}},
			probe{"HGETALL teamster:", []any{"hgetall", "teamster:{t}:session"}},
			probe{"SET teamster:", []any{"set", "teamster:attemptid:{a}", "x"}},
			probe{"EVAL", []any{"eval", "return 1", "0"}})
	}
	return ps
}

// allowedForbidden runs role's forbidden probes on rdb and returns those
// the server did not refuse with NOPERM: empty for a correct ACL.
func allowedForbidden(ctx context.Context, rdb redis.UniversalClient, role RedisRole) []string {
	var out []string
	for _, p := range forbiddenFor(role) {
		err := rdb.Do(ctx, p.args...).Err()
		if !refused(err) {
			out = append(out, fmt.Sprintf("%s may %s (%v)", role, p.name, err))
		}
	}
	return out
}

// refused says err is an ACL refusal: NOPERM, or a script's redis.call
// refused a command or a key.
func refused(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "The user executing the script can't"))
}

// runRouter runs what a router does to Redis: load the scripts, accept,
// publish, confirm, read, session ops, sources, node markers, the reaper.
func runRouter(t *testing.T, ctx context.Context, rdb redis.UniversalClient, session, attempt string) {
	t.Helper()
	st := leases.NewStore(rdb)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("router: %s: %v", what, err)
		}
	}
	must("load", st.Load(ctx))
	acc, err := st.Accept(ctx, leases.AcceptArgs{SessionKey: session, AttemptID: attempt, Digest: "d1", HarnessID: "echo",
		ReplyTo: "_INBOX.x", QueueTimeout: time.Minute, RunBudget: time.Minute, Reply: []byte(`{"ok":true}`)})
	must("accept", err)
	if !acc.New {
		t.Fatalf("router: accept: not new: %+v", acc)
	}
	_, err = st.Known(ctx, session, attempt, "d1")
	must("known", err)
	_, err = st.MarkPublishedTag(ctx, leases.Tag(session), attempt, "router-1")
	must("mark published", err)
	_, err = st.Session(ctx, session)
	if err != nil && err != leases.ErrNotFound {
		must("session", err)
	}
	_, err = st.LeaseOf(ctx, session)
	if err != nil && err != leases.ErrNotFound {
		must("lease of", err)
	}
	_, err = st.AttemptByID(ctx, attempt)
	must("attempt by id", err)
	_, err = st.SessionOp(ctx, "other-"+session, leases.OpCreate, leases.SessionUpdate{"agentId": "a"})
	must("session op", err)
	must("grant source", st.GrantSource(ctx, "src-1", 1))
	_, err = st.RevokeSource(ctx, "src-2")
	must("revoke source", err)
	_, err = st.NodeIDs(ctx)
	must("node ids", err)
	_, err = st.MarkNodes(ctx)
	must("mark nodes", err)
	entries, _, err := st.Due(ctx, 10, time.Second)
	must("due", err)
	for _, e := range entries {
		_, err := st.Reap(ctx, e, time.Second, "router-1")
		must("reap", err)
	}
	// An accept that is withdrawn.
	_, err = st.Accept(ctx, leases.AcceptArgs{SessionKey: session + "-u", AttemptID: attempt + "-u", Digest: "d2", HarnessID: "echo",
		QueueTimeout: time.Minute, RunBudget: time.Minute})
	must("accept 2", err)
	_, err = st.Unaccept(ctx, session+"-u", attempt+"-u")
	must("unaccept", err)
}

// runWorker runs what a worker does: claim, note event numbers, finish,
// mark the outcome published, confirm it sent, read a source.
func runWorker(t *testing.T, ctx context.Context, rdb redis.UniversalClient, session, attempt string) {
	t.Helper()
	st := leases.NewStore(rdb)
	if err := st.Load(ctx); err != nil {
		t.Fatalf("worker: load: %v", err)
	}
	k := leases.NewKeeper(leases.KeeperParams{Store: st, Holder: "worker-1", TTL: 10 * time.Second, NewEpochQuarantine: -1})
	k.Start()
	defer k.Stop()
	l, res, err := k.Claim(ctx, session, attempt, "echo")
	if err != nil || l == nil {
		t.Fatalf("worker: claim: %+v, %v", res, err)
	}
	if err := l.NoteSeq(ctx, 5); err != nil {
		t.Fatalf("worker: note seq: %v", err)
	}
	k.RenewNow(ctx)
	st2, err := l.Finish(ctx, leases.Outcome{Code: "ok", Result: []byte(`{"r":1}`)})
	if err != nil || st2 != leases.Finished {
		t.Fatalf("worker: finish: %v, %v", st2, err)
	}
	if _, err := st.MarkPublished(ctx, session, attempt, "worker-1"); err != nil {
		t.Fatalf("worker: mark published: %v", err)
	}
	if _, err := st.ConfirmSent(ctx, session, attempt, "worker-1"); err != nil {
		t.Fatalf("worker: confirm sent: %v", err)
	}
	if _, err := st.SourceCurrent(ctx, "src-1", 1); err != nil {
		t.Fatalf("worker: source current: %v", err)
	}
}

// runOperator runs the CLI's reads.
func runOperator(t *testing.T, ctx context.Context, rdb redis.UniversalClient, session, attempt string) {
	t.Helper()
	st := leases.NewStore(rdb)
	if _, err := st.InFlight(ctx, 10); err != nil {
		t.Fatalf("operator: in flight: %v", err)
	}
	if _, err := st.InFlightCount(ctx); err != nil {
		t.Fatalf("operator: in flight count: %v", err)
	}
	v, err := st.AttemptByID(ctx, attempt)
	if err != nil {
		t.Fatalf("operator: show: %v", err)
	}
	if _, err := st.AttemptViews(ctx, []leases.DueEntry{{Tag: v.Tag, AttemptID: attempt}}); err != nil {
		t.Fatalf("operator: attempt views: %v", err)
	}
	if _, err := st.TagsOf(ctx, []string{attempt}); err != nil {
		t.Fatalf("operator: tags of: %v", err)
	}
	if _, err := st.SessionByTag(ctx, leases.Tag(session), 10); err != nil {
		t.Fatalf("operator: session: %v", err)
	}
	if _, err := st.NativeStates(ctx, []string{leases.Tag(session)}); err != nil {
		t.Fatalf("operator: prune-state: %v", err)
	}
}

// TestRedisACLRolesOverTLS runs a TLS-only redis-server with the generated
// ACL file and, logged in as each role through cmdutil (rediss:// and the
// CA), the role's real operations: all succeed and none is refused
// anything (ACL LOG stays empty). Then each role's forbidden operations are
// all refused, and a connection without TLS, without a password, or as the
// default user gets nothing.
func TestRedisACLRolesOverTLS(t *testing.T) {
	dir := t.TempDir()
	c := genRedis(t, dir)
	r := startNode(t, dir, c, c.acl.ACLFile)
	a := admin(t, c, r)
	ctx := context.Background()

	url := func(role RedisRole) string { return RedisURL(c.principal(t, role), r.Addr()) }
	router := connectAs(t, c, url(RedisRouter), "")
	worker := connectAs(t, c, url(RedisWorker), "")
	operator := connectAs(t, c, url(RedisOperator), "")
	session, attempt := "session-1", "attempt-1"
	runRouter(t, ctx, router, session, attempt)
	runWorker(t, ctx, worker, session, attempt)
	runOperator(t, ctx, operator, session, attempt)
	hc := connectAs(t, c, url(RedisHealthcheck), "")
	if info, err := hc.Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "role:master") {
		t.Errorf("healthcheck: INFO replication: %v", err)
	}
	if d := denials(t, ctx, a); len(d) > 0 {
		t.Fatalf("the real operations were refused something (ACL LOG):\n%s", strings.Join(d, "\n"))
	}

	for _, role := range RedisRoles() {
		rdb := connectAs(t, c, url(role), "")
		for _, bad := range allowedForbidden(ctx, rdb, role) {
			t.Error(bad)
		}
	}

	// No TLS: the server has no plaintext port.
	plain := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: "router", Password: c.principal(t, RedisRouter).Password, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("a plaintext connection was answered")
	}
	// The default user is off; a wrong password is refused.
	for name, u := range map[string]string{
		"no credentials": "rediss://" + r.Addr() + "/0",
		"wrong password": RedisURL(RedisPrincipal{User: "router", Password: "nope"}, r.Addr()),
		"default user":   RedisURL(RedisPrincipal{User: "default", Password: "x"}, r.Addr()),
	} {
		common := cmdutil.Common{RedisURL: u, RedisCA: c.ca.CertFile}
		rdb, err := common.NewRedis()
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, "teamster:{t}:lease", "x", 0).Err(); err == nil {
			t.Errorf("%s: a write succeeded", name)
		}
		rdb.Close()
	}
}

// TestRedisACLCheckDetectsALooseFile shows that allowedForbidden catches a
// loosened ACL: the router's user given +@all and every key.
func TestRedisACLCheckDetectsALooseFile(t *testing.T) {
	dir := t.TempDir()
	c := genRedis(t, dir)
	b, err := os.ReadFile(c.acl.ACLFile)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, "user router ") {
			l += " +@all ~* &*"
		}
		lines = append(lines, l)
	}
	loose := filepath.Join(dir, "loose.acl")
	if err := os.WriteFile(loose, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startNode(t, dir, c, loose)
	rdb := connectAs(t, c, RedisURL(c.principal(t, RedisRouter), r.Addr()), "")
	got := allowedForbidden(context.Background(), rdb, RedisRouter)
	if len(got) < len(forbiddenFor(RedisRouter))-1 {
		t.Fatalf("the check found only %d of the loosened router's forbidden operations allowed: %q", len(got), got)
	}
	t.Logf("loosened: %d operations allowed, e.g. %s", len(got), got[0])
}

// TestEnsureRedisACLKeepsPasswords: a second run keeps every password,
// passwords.json is 0600, and no file a server reads holds a client's
// password in clear (only the replication and sentinel passwords, which
// the servers must log in with, are there).
func TestEnsureRedisACLKeepsPasswords(t *testing.T) {
	dir := t.TempDir()
	a1, err := EnsureRedisACL(dir, testMaster, []RedisRole{RedisRouter})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := EnsureRedisACL(dir, testMaster, nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := a1.Principal(RedisRouter)
	p2, _ := a2.Principal(RedisRouter)
	if p1 != p2 || len(p1.Password) != 64 {
		t.Fatalf("router: %+v then %+v", p1, p2)
	}
	if _, ok := a1.Principal(RedisWorker); ok {
		t.Fatal("the first run, for the router only, has a worker")
	}
	if _, ok := a2.Principal(RedisWorker); !ok {
		t.Fatal("the second run added no worker")
	}
	fi, err := os.Stat(a2.PasswordFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 0600", a2.PasswordFile, fi.Mode(), err)
	}
	var stored map[string]string
	b, _ := os.ReadFile(a2.PasswordFile)
	if err := json.Unmarshal(b, &stored); err != nil || stored["router"] != p1.Password {
		t.Fatalf("passwords.json: %v", err)
	}
	for _, f := range []string{a2.ACLFile, a2.NodeConf, a2.SentinelConf} {
		body, _ := os.ReadFile(f)
		for _, r := range []RedisRole{RedisRouter, RedisWorker, RedisOperator, RedisHealthcheck, RedisAdmin} {
			p, _ := a2.Principal(r)
			if strings.Contains(string(body), p.Password) {
				t.Errorf("%s holds %s's password in clear", f, r)
			}
		}
		if f == a2.ACLFile && !strings.Contains(string(body), "#"+hashPassword(p1.Password)) {
			t.Errorf("%s: no hash of the router's password", f)
		}
	}
}

// TestRedisSentinelTLS: a primary, a replica (replicating over TLS as the
// replication user) and a Sentinel, all TLS-only with the generated users.
// Router, worker and operator connect in sentinel mode through cmdutil
// with RedisSentinelURL and do their work on the primary; the write reaches
// the replica; the Sentinels refuse what their users may not do.
func TestRedisSentinelTLS(t *testing.T) {
	dir := t.TempDir()
	c := genRedis(t, dir)
	aclFile := c.acl.ACLFile
	primary := startNode(t, mkdir(t, dir, "p"), c, aclFile, "--min-replicas-to-write", "1", "--min-replicas-max-lag", "1")
	replica := startNode(t, mkdir(t, dir, "r"), c, aclFile, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	pa, ra := admin(t, c, primary), admin(t, c, replica)
	ctx := context.Background()
	waitFor(t, "the replica's link to the primary", func() bool {
		info, err := ra.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})

	sport, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := strings.Join([]string{
		"port 0", "tls-port " + strconv.Itoa(sport), "tls-cert-file " + c.cert, "tls-key-file " + c.key,
		"tls-ca-cert-file " + c.ca.CertFile, "tls-auth-clients no", "tls-replication yes",
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", testMaster, primary.Port()),
		"sentinel down-after-milliseconds " + testMaster + " 2000",
		"include " + c.acl.SentinelConf,
	}, "\n") + "\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	hc := c.principal(t, RedisHealthcheck)
	sdir := mkdir(t, dir, "s")
	s, err := redisproc.StartWith(sdir, redisproc.Options{Port: sport, ConfigFile: conf, Sentinel: true,
		Username: hc.User, Password: hc.Password, TLS: c.tls()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	sentinelAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
	waitFor(t, "the Sentinel sees the replica", func() bool {
		rdb := connectSentinel(t, c, sentinelAddr, c.principal(t, RedisHealthcheck))
		defer rdb.Close()
		ok, err := rdb.CkQuorum(ctx, testMaster).Result()
		return err == nil && strings.HasPrefix(ok, "OK")
	})

	url := func(r RedisRole) string {
		return RedisSentinelURL(c.principal(t, r), testMaster, []string{sentinelAddr})
	}
	session, attempt := "session-s", "attempt-s"
	router := connectAs(t, c, url(RedisRouter), cmdutil.RedisSentinel)
	runRouter(t, ctx, router, session, attempt)
	runWorker(t, ctx, connectAs(t, c, url(RedisWorker), cmdutil.RedisSentinel), session, attempt)
	runOperator(t, ctx, connectAs(t, c, url(RedisOperator), cmdutil.RedisSentinel), session, attempt)
	waitFor(t, "the write reaches the replica", func() bool {
		n, err := ra.Exists(ctx, "teamster:attemptid:{"+attempt+"}").Result()
		return err == nil && n == 1
	})
	for _, a := range []*redis.Client{pa, ra} {
		if d := denials(t, ctx, a); len(d) > 0 {
			t.Errorf("%s refused something (ACL LOG):\n%s", a.Options().Addr, strings.Join(d, "\n"))
		}
	}
	for _, bad := range allowedForbidden(ctx, router, RedisRouter) {
		t.Error(bad)
	}

	// On the Sentinel: a client may ask for the primary, not reconfigure it.
	for _, r := range []RedisRole{RedisRouter, RedisWorker, RedisOperator, RedisHealthcheck} {
		sc := connectSentinel(t, c, sentinelAddr, c.principal(t, r))
		for _, cmd := range [][]any{
			{"sentinel", "set", testMaster, "down-after-milliseconds", "1000"},
			{"sentinel", "failover", testMaster},
			{"sentinel", "remove", testMaster},
			{"sentinel", "reset", "*"},
			{"sentinel", "config", "get", "*"},
			{"sentinel", "masters"},
			{"sentinel", "debug"},
			{"acl", "list"},
		} {
			rc := redis.NewCmd(ctx, cmd...)
			_ = sc.Process(ctx, rc)
			if err := rc.Err(); !refused(err) {
				t.Errorf("%s on the Sentinel: %v: %v, want NOPERM", r, cmd, err)
			}
		}
		sc.Close()
	}
	// admin may: it is how a person changes a Sentinel's settings.
	sc := connectSentinel(t, c, sentinelAddr, c.principal(t, RedisAdmin))
	defer sc.Close()
	if err := sc.Set(ctx, testMaster, "down-after-milliseconds", "2000").Err(); err != nil {
		t.Errorf("admin: SENTINEL SET: %v", err)
	}
}

func connectSentinel(t *testing.T, c *redisCreds, addr string, p RedisPrincipal) *redis.SentinelClient {
	t.Helper()
	cfg, err := c.tls().ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewSentinelClient(&redis.Options{Addr: addr, Username: p.User, Password: p.Password, TLSConfig: cfg})
}

func mkdir(t *testing.T, dir, name string) string {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
