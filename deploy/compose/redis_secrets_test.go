package compose

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/credentials"
)

// The Redis secrets the compose services mount, generated for the tests with
// internal/credentials, and the checks of how each service uses them.

// checkDaemonRedis checks a daemon's Redis settings, for role (router or
// worker): TEAMSTER_REDIS_URL is what credentials.RedisSentinelURL writes
// for the role's generated user without a password, with the shipped
// Sentinels in some order and the master name they monitor, so rediss://
// (TLS) with its dial timeout and no CLIENT SETINFO; redis.ParseFailoverURL
// reads it (as internal/cmdutil does). It names no password: the password
// is TEAMSTER_REDIS_PASSWORD_FILE, mounted from the role's generated file
// (and no other role's is mounted); the CA is the deployment's.
func (rs *redisSet) checkDaemonRedis(t *testing.T, svc *composeService, service string, role credentials.RedisRole) {
	t.Helper()
	env := svc.Environment
	raw := env["TEAMSTER_REDIS_URL"]
	o, err := redis.ParseFailoverURL(raw)
	if err != nil {
		t.Errorf("%s: TEAMSTER_REDIS_URL: %v", service, err)
		return
	}
	var want []string
	for _, name := range sortedKeys(rs.sentinels) {
		want = append(want, net.JoinHostPort(name, strconv.Itoa(rs.sentinels[name].port)))
	}
	got := slices.Clone(o.SentinelAddrs)
	sort.Strings(got)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s: TEAMSTER_REDIS_URL's Sentinels (-sentinel services +URL):\n%s", service, d)
	}
	if o.SentinelPassword != "" || o.Password != "" {
		t.Errorf("%s: TEAMSTER_REDIS_URL carries a password: a secret in the committed compose.yaml (TEAMSTER_REDIS_PASSWORD_FILE gives it)", service)
	}
	if w := credentials.RedisSentinelURL(credentials.RedisPrincipal{User: string(role)}, rs.master(t), o.SentinelAddrs); raw != w {
		t.Errorf("%s: TEAMSTER_REDIS_URL\n  %s\nwant (the %s user, the master the Sentinels monitor, TLS)\n  %s", service, raw, role, w)
	}
	if src, ok := svc.mountOf(env["TEAMSTER_REDIS_PASSWORD_FILE"]); !ok || filepath.Clean(src) != filepath.Join("secrets", "redis", string(role)+".password") {
		t.Errorf("%s: TEAMSTER_REDIS_PASSWORD_FILE %q is mounted from %q, want secrets/redis/%s.password", service, env["TEAMSTER_REDIS_PASSWORD_FILE"], src, role)
	}
	if ca, ok := svc.mountOf(env["TEAMSTER_REDIS_TLS_CA"]); !ok || filepath.Clean(ca) != filepath.Join("secrets", "tls", "ca.pem") {
		t.Errorf("%s: TEAMSTER_REDIS_TLS_CA %q is mounted from %q, want secrets/tls/ca.pem", service, env["TEAMSTER_REDIS_TLS_CA"], ca)
	}
	for _, m := range svc.Volumes {
		if strings.HasPrefix(filepath.Clean(m.Source), filepath.Join("secrets", "redis")) && filepath.Base(m.Source) != string(role)+".password" {
			t.Errorf("%s: mounts %s, not its own Redis secret", service, m.Source)
		}
	}
}

// userRules are the rules of the last "user <name> ..." directive.
func (d directives) userRules(name string) []string {
	for i := len(d) - 1; i >= 0; i-- {
		if strings.EqualFold(d[i].name, "user") && len(d[i].args) > 0 && d[i].args[0] == name {
			return d[i].args[1:]
		}
	}
	return nil
}

// redisSecrets are Redis credentials generated for a test with
// internal/credentials, laid out as compose mounts them from ./secrets: the
// CA and a certificate per data node and Sentinel in <root>/tls, the ACL
// files in <root>/redis.
type redisSecrets struct {
	root string
	ca   *credentials.CA
	acl  *credentials.RedisACL
}

func genRedisSecrets(t *testing.T, rs *redisSet, master string) *redisSecrets {
	t.Helper()
	root := filepath.Join(t.TempDir(), "secrets")
	ca, err := credentials.EnsureCA(filepath.Join(root, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(sortedKeys(rs.nodes), sortedKeys(rs.sentinels)...) {
		if _, _, err := ca.EnsureServer(filepath.Join(root, "tls"), name, []string{name}); err != nil {
			t.Fatal(err)
		}
	}
	acl, err := credentials.EnsureRedisACL(filepath.Join(root, "redis"), master, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &redisSecrets{root: root, ca: ca, acl: acl}
}

// local is the file service svc mounts at target: in the generated
// directory when compose mounts it from ./secrets/.
func (g *redisSecrets) local(svc *composeService, target string) (string, bool) {
	src, ok := svc.mountOf(target)
	if !ok {
		return "", false
	}
	if rest, ok := strings.CutPrefix(filepath.Clean(src), "secrets"+string(filepath.Separator)); ok {
		return filepath.Join(g.root, rest), true
	}
	return src, true
}

// checkTLS checks that a data node or a Sentinel speaks TLS only, with its
// own generated certificate, verifying peers against the deployment's CA,
// TLS on its own links too (replication, Sentinel to node and to Sentinel),
// and asks clients for no certificate (they log in as an ACL user).
func (g *redisSecrets) checkTLS(t *testing.T, svc *composeService, name string, d directives) {
	t.Helper()
	if d.value("port") != "0" || d.value("tls-port") == "" {
		t.Errorf("%s: port %q, tls-port %q: want port 0 and a tls-port (TLS only)", name, d.value("port"), d.value("tls-port"))
	}
	for setting, want := range map[string]string{"tls-replication": "yes", "tls-auth-clients": "no"} {
		if got := d.value(setting); got != want {
			t.Errorf("%s: %s %q, want %s", name, setting, got, want)
		}
	}
	for setting, want := range map[string]string{
		"tls-cert-file":    "secrets/tls/" + name + ".pem",
		"tls-key-file":     "secrets/tls/" + name + "-key.pem",
		"tls-ca-cert-file": "secrets/tls/ca.pem",
	} {
		if src, ok := svc.mountOf(d.value(setting)); !ok || filepath.Clean(src) != want {
			t.Errorf("%s: %s %q is mounted from %q, want %s (teamster credentials)", name, setting, d.value(setting), src, want)
		}
	}
}

// checkHealthcheck checks that a service's healthcheck logs in over TLS as
// the generated healthcheck user, its password (REDISCLI_AUTH) from the
// generated env file.
func (g *redisSecrets) checkHealthcheck(t *testing.T, svc *composeService, name string) {
	t.Helper()
	if svc.Healthcheck == nil {
		t.Errorf("%s: no healthcheck (routers and workers wait for service_healthy)", name)
		return
	}
	test := strings.Join(svc.Healthcheck.Test, " ")
	if !strings.Contains(test, "--tls") || !strings.Contains(test, "--user "+string(credentials.RedisHealthcheck)) {
		t.Errorf("%s: healthcheck %q does not log in over TLS as the healthcheck user", name, test)
	}
	if _, ok := svc.Environment["REDISCLI_AUTH"]; ok {
		t.Errorf("%s: REDISCLI_AUTH in the committed compose.yaml: it comes from the generated env file", name)
	}
	want := filepath.Join("secrets", "redis", "healthcheck.env")
	if !slices.ContainsFunc(svc.EnvFile, func(f string) bool { return filepath.Clean(f) == want }) {
		t.Errorf("%s: env_file %q, want %s (REDISCLI_AUTH, so the healthcheck can log in)", name, svc.EnvFile, want)
		return
	}
	b, err := os.ReadFile(g.acl.HealthcheckEnv)
	hc, _ := g.acl.Principal(credentials.RedisHealthcheck)
	if err != nil || strings.TrimSpace(string(b)) != "REDISCLI_AUTH="+hc.Password {
		t.Errorf("%s: the generated %s does not hold the healthcheck user's password (%v)", name, want, err)
	}
}
