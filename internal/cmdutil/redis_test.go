package cmdutil

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// The ACL user every test server has; its default user is off.
const (
	testUser     = "teamster"
	testPassword = "pw-Fz8q1"
)

// aclArgs make testUser the only user of a standalone server.
var aclArgs = []string{"--user", "default", "off", "--user", testUser, "on", ">" + testPassword, "~*", "&*", "+@all"}

// startRedisT starts a standalone redis-server the test kills when it ends.
func startRedisT(t *testing.T, o redisproc.Options) *redisproc.Redis {
	t.Helper()
	r, err := redisproc.StartWith(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	return r
}

// connectT connects through Common.Redis; the test closes the client.
func connectT(t *testing.T, c Common) redis.UniversalClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, err := c.Redis(ctx)
	if err != nil {
		t.Fatalf("%s mode: %v", c.RedisMode, err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// roundTrip writes n keys and reads them back through rdb.
func roundTrip(t *testing.T, rdb redis.UniversalClient, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("key:%d", i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := rdb.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
	}
}

// userURL puts the test user into a server's URL.
func userURL(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(testUser, testPassword)
	return u.String()
}

// connectErr is the error Common.Redis answers.
func connectErr(t *testing.T, c Common) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, err := c.Redis(ctx)
	if err == nil {
		rdb.Close()
		t.Fatalf("%s mode, %s: connected", c.RedisMode, redactRedisURL(c.RedisURL))
	}
	return err
}

// mustContain fails unless the error names every one of want and none of
// never.
func mustContain(t *testing.T, err error, want []string, never ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	for _, n := range never {
		if strings.Contains(err.Error(), n) {
			t.Errorf("error %q shows %q", err, n)
		}
	}
}

// Standalone mode with an ACL user: the URL's user and password work, a
// wrong password does not, and the error names the mode and the address
// but not the password.
func TestRedisStandaloneWithAnACLUser(t *testing.T) {
	r := startRedisT(t, redisproc.Options{Args: aclArgs, Username: testUser, Password: testPassword})
	rdb := connectT(t, Common{RedisURL: userURL(t, r.URL())}) // the mode's default
	if _, ok := rdb.(*redis.Client); !ok {
		t.Fatalf("standalone client is a %T", rdb)
	}
	roundTrip(t, rdb, 3)

	wrong := strings.Replace(userURL(t, r.URL()), testPassword, "not-the-pw", 1)
	err := connectErr(t, Common{RedisURL: wrong, RedisMode: RedisStandalone})
	mustContain(t, err, []string{"standalone mode", r.Addr(), "WRONGPASS"}, "not-the-pw")
	err = connectErr(t, Common{RedisURL: r.URL(), RedisMode: RedisStandalone})
	mustContain(t, err, []string{"standalone mode", r.Addr(), "NOAUTH"})
}

// --redis-password-file gives the password of a URL that names only its
// user (one trailing newline ignored); a missing or empty file, or a URL
// with a password of its own too, is an error that names the flag, never
// the password.
func TestRedisPasswordFile(t *testing.T) {
	r := startRedisT(t, redisproc.Options{Args: aclArgs, Username: testUser, Password: testPassword})
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	u, err := url.Parse(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(testUser)
	userOnly := u.String()
	rdb := connectT(t, Common{RedisURL: userOnly, RedisPasswordFile: file("pw", testPassword+"\n")})
	roundTrip(t, rdb, 1)

	for name, c := range map[string]Common{
		"missing file":  {RedisURL: userOnly, RedisPasswordFile: filepath.Join(dir, "none")},
		"empty file":    {RedisURL: userOnly, RedisPasswordFile: file("empty", "\n")},
		"two passwords": {RedisURL: userURL(t, r.URL()), RedisPasswordFile: file("pw2", testPassword)},
	} {
		_, err := c.NewRedis()
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		mustContain(t, err, []string{"--redis-password-file"}, testPassword)
	}
	// The wrong password in the file is refused by the server.
	err = connectErr(t, Common{RedisURL: userOnly, RedisPasswordFile: file("wrong", "not-the-pw")})
	mustContain(t, err, []string{"WRONGPASS"}, "not-the-pw")
}

// A command ends at its context's deadline, well before go-redis's own read
// timeout (3 s, then three retries on new connections: some 12 s): on a
// Redis that stopped answering (SIGSTOP), a GET with a 200 ms deadline
// returns a timeout before 3 s have passed.
func TestRedisHonoursDeadlines(t *testing.T) {
	r := startRedisT(t, redisproc.Options{Args: aclArgs, Username: testUser, Password: testPassword})
	rdb := connectT(t, Common{RedisURL: userURL(t, r.URL())})
	roundTrip(t, rdb, 1)
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Resume() })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := rdb.Get(ctx, "key:0").Err()
	took := time.Since(start)
	if err == nil {
		t.Fatal("a GET on a stopped Redis succeeded")
	}
	if took >= 3*time.Second {
		t.Fatalf("a GET with a 200 ms deadline took %v (%v): the deadline did not reach the socket", took, err)
	}
	t.Logf("returned after %v: %v", took.Round(time.Millisecond), err)
}

// Standalone mode over mutual TLS: --redis-tls-ca verifies the server and
// --redis-tls-cert and --redis-tls-key are the client certificate it
// requires; without the CA the server's certificate is not trusted.
func TestRedisStandaloneOverMutualTLS(t *testing.T) {
	files := testCerts(t, t.TempDir())
	r := startRedisT(t, redisproc.Options{Args: aclArgs, Username: testUser, Password: testPassword, TLS: files})
	if !strings.HasPrefix(r.URL(), "rediss://") {
		t.Fatalf("URL %s", r.URL())
	}
	c := Common{RedisURL: userURL(t, r.URL()), RedisMode: RedisStandalone,
		RedisCA: files.CAFile, RedisCert: files.ClientCertFile, RedisKey: files.ClientKeyFile}
	roundTrip(t, connectT(t, c), 3)

	noCA := c
	noCA.RedisCA = ""
	mustContain(t, connectErr(t, noCA), []string{"standalone mode", r.Addr(), "certificate signed by unknown authority"})
	plain := c
	plain.RedisURL = strings.Replace(c.RedisURL, "rediss://", "redis://", 1)
	mustContain(t, connectErr(t, plain), []string{"need a rediss:// --redis-url"})
}

// startSentinelSetT starts a SentinelSet the test closes when it ends.
func startSentinelSetT(t *testing.T, opts redisproc.SentinelOptions) *redisproc.SentinelSet {
	t.Helper()
	s, err := redisproc.StartSentinelSet(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// isPrimary fails unless rdb is connected to the set's primary: ROLE says
// master, and the primary the Sentinels name has the key rdb wrote.
func isPrimary(t *testing.T, s *redisproc.SentinelSet, rdb redis.UniversalClient, opts redisproc.SentinelOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := rdb.Do(ctx, "ROLE").Slice()
	if err != nil || len(reply) == 0 || reply[0] != "master" {
		t.Fatalf("ROLE %v, %v; want master", reply, err)
	}
	if err := rdb.Set(ctx, "on-the-primary", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: addr, Username: opts.Username, Password: opts.Password, TLSConfig: tlsOf(t, opts.TLS)})
	defer direct.Close()
	if got, err := direct.Get(ctx, "on-the-primary").Result(); err != nil || got != "yes" {
		t.Fatalf("the primary %s: on-the-primary = %q, %v", addr, got, err)
	}
}

// tlsOf is the client TLS configuration of files, nil without.
func tlsOf(t *testing.T, files *redisproc.TLS) *tls.Config {
	t.Helper()
	if files == nil {
		return nil
	}
	cfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Sentinel mode where the Sentinels and the data nodes have the same ACL
// user: the URL's user information alone authenticates to both (go-redis
// takes it for the Sentinels; Common.Redis gives it to the primary too).
// A wrong password fails with an error naming the mode, the master and the
// Sentinels, not the password.
func TestRedisSentinelWithOneACLUser(t *testing.T) {
	t.Parallel()
	opts := redisproc.SentinelOptions{Username: testUser, Password: testPassword,
		SentinelUsername: testUser, SentinelPassword: testPassword}
	s := startSentinelSetT(t, opts)
	if strings.Contains(s.URL(), "password=") {
		t.Fatalf("URL %s has a password parameter", s.URL())
	}
	rdb := connectT(t, Common{RedisURL: s.URL(), RedisMode: RedisSentinel})
	roundTrip(t, rdb, 3)
	isPrimary(t, s, rdb, opts)

	// The same with the password in --redis-password-file: it logs in to
	// the Sentinels and to the primary.
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(testPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	rdb = connectT(t, Common{RedisURL: strings.Replace(s.URL(), ":"+testPassword+"@", "@", 1), RedisMode: RedisSentinel, RedisPasswordFile: pw})
	roundTrip(t, rdb, 1)

	wrong := strings.Replace(s.URL(), testPassword, "not-the-pw", 1)
	err := connectErr(t, Common{RedisURL: wrong, RedisMode: RedisSentinel})
	mustContain(t, err, append([]string{"sentinel mode", `"` + s.MasterName() + `"`}, s.SentinelAddrs()...), "not-the-pw")
}

// Sentinel mode where the Sentinels and the data nodes have different ACL
// users: the user information is the Sentinels', the username and password
// parameters the data nodes'.
func TestRedisSentinelWithTwoACLUsers(t *testing.T) {
	t.Parallel()
	opts := redisproc.SentinelOptions{Username: testUser, Password: testPassword,
		SentinelUsername: "watcher", SentinelPassword: "pw-Sentinel7"}
	s := startSentinelSetT(t, opts)
	q := mustQuery(s.URL())
	if q.Get("username") != testUser || q.Get("password") != testPassword {
		t.Fatalf("URL %s: no data-node user in the parameters", s.URL())
	}
	rdb := connectT(t, Common{RedisURL: s.URL(), RedisMode: RedisSentinel})
	roundTrip(t, rdb, 3)
	isPrimary(t, s, rdb, opts)
}

// Sentinel mode over TLS with an ACL user, the Sentinels and the data nodes
// speaking TLS only: --redis-tls-ca verifies all of them.
func TestRedisSentinelOverTLS(t *testing.T) {
	t.Parallel()
	files := testCerts(t, t.TempDir())
	files.ClientCertFile, files.ClientKeyFile = "", ""
	opts := redisproc.SentinelOptions{Username: testUser, Password: testPassword,
		SentinelUsername: testUser, SentinelPassword: testPassword, TLS: files}
	s := startSentinelSetT(t, opts)
	if !strings.HasPrefix(s.URL(), "rediss://") {
		t.Fatalf("URL %s", s.URL())
	}
	rdb := connectT(t, Common{RedisURL: s.URL(), RedisMode: RedisSentinel, RedisCA: files.CAFile})
	roundTrip(t, rdb, 3)
	isPrimary(t, s, rdb, opts)
}

// startClusterT starts a Cluster the test closes when it ends.
func startClusterT(t *testing.T, opts redisproc.ClusterOptions) *redisproc.Cluster {
	t.Helper()
	c, err := redisproc.StartCluster(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// everyShardHasKeys fails unless each of the three masters holds keys: the
// client spread the writes over the cluster.
func everyShardHasKeys(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster client is a %T", rdb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var masters atomic.Int32 // ForEachMaster calls f concurrently
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("master %s holds no key", m.Options().Addr)
		}
		masters.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := masters.Load(); n != 3 {
		t.Fatalf("%d masters, want 3", n)
	}
}

// Cluster mode with an ACL user: the URL's user and password reach every
// node, and the keys spread over the three shards. A wrong password fails
// with an error naming the mode and the seeds, not the password.
func TestRedisClusterWithAnACLUser(t *testing.T) {
	t.Parallel()
	c := startClusterT(t, redisproc.ClusterOptions{Username: testUser, Password: testPassword})
	rdb := connectT(t, Common{RedisURL: c.URL(), RedisMode: RedisCluster})
	roundTrip(t, rdb, 30)
	everyShardHasKeys(t, rdb)

	wrong := strings.Replace(c.URL(), testPassword, "not-the-pw", 1)
	err := connectErr(t, Common{RedisURL: wrong, RedisMode: RedisCluster})
	mustContain(t, err, append([]string{"cluster mode", "WRONGPASS"}, c.SeedAddrs()...), "not-the-pw")
}

// Cluster mode over TLS with an ACL user, every node speaking TLS only
// (clients, replication, cluster bus).
func TestRedisClusterOverTLS(t *testing.T) {
	t.Parallel()
	files := testCerts(t, t.TempDir())
	files.ClientCertFile, files.ClientKeyFile = "", ""
	c := startClusterT(t, redisproc.ClusterOptions{Username: testUser, Password: testPassword, TLS: files})
	if !strings.HasPrefix(c.URL(), "rediss://") {
		t.Fatalf("URL %s", c.URL())
	}
	rdb := connectT(t, Common{RedisURL: c.URL(), RedisMode: RedisCluster, RedisCA: files.CAFile})
	roundTrip(t, rdb, 30)
	everyShardHasKeys(t, rdb)
}

// An unknown mode is an error that lists the valid ones.
func TestRedisUnknownMode(t *testing.T) {
	_, err := (&Common{RedisURL: DefaultRedisURL, RedisMode: "replicated"}).NewRedis()
	if err == nil {
		t.Fatal("mode replicated: no error")
	}
	mustContain(t, err, []string{`"replicated"`, "standalone, sentinel or cluster"})
}

// A URL that does not parse is an error naming the mode, without the
// password (net/url's own error quotes the whole URL).
func TestRedisBadURLHidesThePassword(t *testing.T) {
	for _, c := range []Common{
		{RedisMode: RedisStandalone, RedisURL: "redis://u:secret-1@127.0.0.1:bad/0"},
		{RedisMode: RedisSentinel, RedisURL: "redis://u:secret-1@127.0.0.1:26379/0?addr=127.0.0.1:26380"},
		{RedisMode: RedisSentinel, RedisURL: "redis://127.0.0.1:26379/0?master_name=m&password=secret-1&bogus=1"},
		{RedisMode: RedisCluster, RedisURL: "redis://u:secret-1@127.0.0.1:7000?skip_verify=true"},
	} {
		_, err := c.NewRedis()
		if err == nil {
			t.Fatalf("%s mode, %s: no error", c.RedisMode, c.RedisURL)
		}
		mustContain(t, err, []string{c.RedisMode + " mode", "127.0.0.1"}, "secret-1")
	}
}

// In sentinel mode the primary's credentials are the username and password
// parameters; without either, the Sentinels' from the user information; an
// empty password parameter means none.
func TestRedisSentinelPrimaryCredentials(t *testing.T) {
	for _, tc := range []struct {
		url, user, password string
	}{
		{"redis://watcher:pw-s@127.0.0.1:26379/0?master_name=m", "watcher", "pw-s"},
		{"redis://watcher:pw-s@127.0.0.1:26379/0?master_name=m&username=app&password=pw-a", "app", "pw-a"},
		{"redis://watcher:pw-s@127.0.0.1:26379/0?master_name=m&password=", "", ""},
		{"redis://127.0.0.1:26379/0?master_name=m", "", ""},
	} {
		rdb, err := (&Common{RedisURL: tc.url, RedisMode: RedisSentinel}).NewRedis()
		if err != nil {
			t.Fatal(err)
		}
		opts := rdb.(*redis.Client).Options() // the primary's
		rdb.Close()
		if opts.Username != tc.user || opts.Password != tc.password {
			t.Errorf("%s: primary user %q password %q, want %q %q", tc.url, opts.Username, opts.Password, tc.user, tc.password)
		}
	}
}
