package compose

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/credentials"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	want := map[string][]string{
		"nats":     {"nats-1", "nats-2", "nats-3"},
		"redis":    {"redis-1", "redis-2", "redis-3"},
		"sentinel": {"sentinel-1", "sentinel-2", "sentinel-3"},
		"router":   {"router-1", "router-2"},
		"worker":   {"worker-1", "worker-2", "worker-3"},
		// deploy/monitoring: its own tests check what these two load.
		"prometheus": {"prometheus"},
		"grafana":    {"grafana"},
	}
	got := map[string][]string{}
	for _, role := range []string{"nats", "redis", "sentinel", "router", "worker", "prometheus", "grafana"} {
		got[role] = c.byRole(role)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("services by role (-want +got):\n%s", d)
	}
	for name, s := range c.Services {
		if s.role() == "" {
			t.Errorf("service %s: neither a nats:, redis: image nor a teamster build with a command", name)
		}
	}
	for _, name := range c.byRole("nats") {
		if img := c.Services[name].Image; !strings.HasPrefix(img, "nats:2") {
			t.Errorf("%s: image %q, want nats:2.x", name, img)
		}
	}
	// The fencing across failovers relies on Redis behaviour checked on
	// Redis 7 (docs/ARCHITECTURE.md: a restarted or promoted node has a
	// new replication id); the Sentinels run the version of the nodes they
	// promote.
	for _, name := range append(c.byRole("redis"), c.byRole("sentinel")...) {
		if img := c.Services[name].Image; img != "redis:7" && !strings.HasPrefix(img, "redis:7.") && !strings.HasPrefix(img, "redis:7-") {
			t.Errorf("%s: image %q, want redis:7", name, img)
		}
	}
}

// TestComposeReferencesExist checks every file and directory compose.yaml
// names: build contexts and Dockerfiles, bind mounts, env files; and that
// named volumes and depends_on targets are declared. A file under
// ./secrets/ must be one that `teamster credentials` generates.
func TestComposeReferencesExist(t *testing.T) {
	c := loadCompose(t)
	_, creds := generated(t, nodeConfig)
	generatedRoot := filepath.Dir(creds.NATSAuth) // <dir>/secrets/nats
	generatedRoot = filepath.Dir(filepath.Dir(generatedRoot))
	exists := func(what, p string, dir bool) {
		t.Helper()
		if filepath.IsAbs(p) || strings.HasPrefix(p, "~") {
			t.Errorf("%s %q: an absolute path is not portable; use a path relative to deploy/compose", what, p)
			return
		}
		local := p
		secret := false
		if clean := filepath.Clean(p); strings.HasPrefix(clean, "secrets"+string(filepath.Separator)) {
			local, secret = filepath.Join(generatedRoot, clean), true
		}
		fi, err := os.Stat(local)
		switch {
		case secret && err == nil && slices.Contains([]string{"ca-key.pem", "passwords.json"}, fi.Name()):
			t.Errorf("%s %q: a secret that stays on the host (the CA's key, every password) is mounted", what, p)
		case secret && err == nil && !dir && !strings.HasSuffix(what, ": env_file") && fi.Mode().Perm()&0o004 == 0:
			// The containers do not run as the file's owner (teamster's
			// image runs as uid 65532, redis drops to its own user).
			t.Errorf("%s %q: mode %v, its container's user could not read it", what, p, fi.Mode().Perm())
		case err != nil:
			t.Errorf("%s %q: %v", what, p, err)
		case dir && !fi.IsDir():
			t.Errorf("%s %q is not a directory", what, p)
		case !dir && fi.IsDir():
			t.Errorf("%s %q is a directory, want a file", what, p)
		}
	}
	for name, s := range c.Services {
		if s.Build != nil {
			exists(name+": build context", s.Build.Context, true)
			df := s.Build.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			exists(name+": dockerfile", filepath.Join(s.Build.Context, df), false)
		}
		for _, m := range s.Volumes {
			switch m.Type {
			case "bind":
				exists(name+": bind mount", m.Source, false)
			case "volume":
				if _, ok := c.Volumes[m.Source]; m.Source != "" && !ok {
					t.Errorf("%s: named volume %q is not declared under volumes:", name, m.Source)
				}
			default:
				t.Errorf("%s: mount type %q is not checked by this test", name, m.Type)
			}
		}
		for _, f := range s.EnvFile {
			exists(name+": env_file", f, false)
		}
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on %q, which is not a service", name, dep)
			}
		}
	}
}

var includeRe = regexp.MustCompile(`(?m)^\s*include\s+["']?([^"'\s;]+)`)

// secretPathRe finds the files a node config names under secretsMount.
var secretPathRe = regexp.MustCompile(`/etc/nats/secrets/[^"'\s]+`)

// TestComposeNATSNodes loads each node's config as its container would see
// it: the config file named on the command line must be mounted, and so must
// every file it includes, next to it.
func TestComposeNATSNodes(t *testing.T) {
	c := loadCompose(t)
	nodes := c.byRole("nats")
	names := map[string]string{}
	for _, name := range nodes {
		s := c.Services[name]
		var conf string
		for i, a := range s.Command {
			if (a == "--config" || a == "-c") && i+1 < len(s.Command) {
				conf = s.Command[i+1]
			}
		}
		if conf == "" {
			t.Errorf("%s: command %q names no --config", name, s.Command)
			continue
		}
		local, ok := s.mountOf(conf)
		if !ok {
			t.Errorf("%s: its config %s is not bind-mounted", name, conf)
			continue
		}
		b, err := os.ReadFile(local)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range includeRe.FindAllStringSubmatch(string(b), -1) {
			target := path.Join(path.Dir(conf), m[1])
			src, ok := s.mountOf(target)
			if !ok {
				t.Errorf("%s: %s includes %s, but nothing is mounted at %s", name, local, m[1], target)
			} else if filepath.Clean(src) != filepath.Join(filepath.Dir(local), m[1]) {
				t.Errorf("%s: %s is mounted from %s, want %s", name, target, src, filepath.Join(filepath.Dir(local), m[1]))
			}
		}
		// Every file the config names under the secrets mount is mounted
		// from the generated directory.
		for _, m := range secretPathRe.FindAllString(string(b), -1) {
			want := filepath.Join("secrets", strings.TrimPrefix(m, secretsMount+"/"))
			if src, ok := s.mountOf(m); !ok || filepath.Clean(src) != want {
				t.Errorf("%s: %s names %s, mounted from %q, want %s", name, local, m, src, want)
			}
		}
		// Loaded with this test's generated secrets in their place.
		local, _ = generated(t, local)
		o, err := server.ProcessConfigFile(local)
		if err != nil {
			t.Errorf("%s: %s does not load: %v", name, local, err)
			continue
		}
		if prev, dup := names[o.ServerName]; dup {
			t.Errorf("%s and %s share server_name %q", prev, name, o.ServerName)
		}
		names[o.ServerName] = name
		// The monitoring endpoint has no authentication and shows every
		// connection and subscription: the container's loopback only,
		// and no port published for it.
		if o.HTTPPort != 0 && o.HTTPHost != "127.0.0.1" {
			t.Errorf("%s: monitoring listens on %s:%d, want 127.0.0.1 (it has no authentication)", name, o.HTTPHost, o.HTTPPort)
		}
		for _, p := range s.Ports {
			if o.HTTPPort != 0 && strings.HasSuffix(p, ":"+strconv.Itoa(o.HTTPPort)) {
				t.Errorf("%s: publishes the monitoring port (%s)", name, p)
			}
		}
		if o.MaxPayload != bus.ServerMaxPayload {
			t.Errorf("%s: max_payload %d, want %d", name, o.MaxPayload, bus.ServerMaxPayload)
		}
		if !o.JetStream {
			t.Errorf("%s: JetStream is off", name)
		}
		if !c.onVolume(s, o.StoreDir) {
			t.Errorf("%s: store_dir %s is not on a named volume", name, o.StoreDir)
		}
		if o.Cluster.Name != "teamster" || o.Cluster.Port == 0 {
			t.Errorf("%s: cluster %q on port %d", name, o.Cluster.Name, o.Cluster.Port)
		}
		if o.Cluster.TLSConfig == nil || o.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Errorf("%s: cluster routes do not authenticate by certificate (tls with verify: true)", name)
		}
		if o.TLSConfig == nil {
			t.Errorf("%s: clients connect without TLS", name)
		}
		var hosts []string
		for _, r := range o.Routes {
			hosts = append(hosts, r.Hostname())
			if r.Port() != fmt.Sprint(o.Cluster.Port) {
				t.Errorf("%s: route %s is not on the cluster port %d", name, r.Redacted(), o.Cluster.Port)
			}
		}
		sort.Strings(hosts)
		if d := cmp.Diff(nodes, hosts); d != "" {
			t.Errorf("%s: routes (-nats services +route hosts):\n%s", name, d)
		}
		if s.Healthcheck == nil {
			t.Errorf("%s: no healthcheck (routers and workers wait for service_healthy)", name)
		}
	}
}

// mustMount is the local file mounted at target in svc ("" when none).
func mustMount(t *testing.T, svc *composeService, target string) string {
	t.Helper()
	local, ok := svc.mountOf(target)
	if !ok {
		t.Errorf("nothing is mounted at %s", target)
	}
	return local
}

// onVolume says whether dir lies on a named volume of s.
func (c *composeSpec) onVolume(s *composeService, dir string) bool {
	for _, m := range s.Volumes {
		if m.Type == "volume" && m.Source != "" && (dir == m.Target || strings.HasPrefix(dir, m.Target+"/")) {
			return true
		}
	}
	return false
}

// TestComposeDaemons checks the routers' and workers' settings: their NATS
// URLs log in to the shipped accounts config as the right principal, they
// reach Redis through the Sentinels with the Sentinels' and the data nodes'
// passwords, they start once NATS and Redis are healthy, and each worker's
// config file is mounted, valid and its own.
func TestComposeDaemons(t *testing.T) {
	c := loadCompose(t)
	s := startShipped(t)
	natsNodes := c.byRole("nats")
	rs := c.redisSet(t)
	deps := append(append(append([]string(nil), natsNodes...), c.byRole("redis")...), c.byRole("sentinel")...)
	for _, role := range []string{"router", "worker"} {
		for _, name := range c.byRole(role) {
			svc := c.Services[name]
			env := svc.Environment
			if env["TEAMSTER_LOG_FORMAT"] != "json" {
				t.Errorf("%s: TEAMSTER_LOG_FORMAT %q, want json", name, env["TEAMSTER_LOG_FORMAT"])
			}
			for _, dep := range deps {
				if cond, ok := svc.DependsOn[dep]; !ok || cond != "service_healthy" {
					t.Errorf("%s: depends_on %s %q, want service_healthy", name, dep, cond)
				}
			}
			id := env["TEAMSTER_ROUTER_ID"]
			if role == "worker" {
				if cfg, err := worker.LoadConfig(mustMount(t, svc, env["TEAMSTER_WORKER_CONFIG"])); err == nil {
					id = cfg.WorkerID
				}
			}
			checkNATSURL(t, s, svc, name, role, id, natsNodes)
			if mode := env["TEAMSTER_REDIS_MODE"]; mode != "sentinel" {
				t.Errorf("%s: TEAMSTER_REDIS_MODE %q, want sentinel", name, mode)
			}
			rs.checkDaemonRedis(t, svc, name, credentials.RedisRole(role))
		}
	}

	seen := map[string]string{}
	manifests := map[string]selection.Manifest{}
	for _, name := range c.byRole("worker") {
		svc := c.Services[name]
		target := svc.Environment["TEAMSTER_WORKER_CONFIG"]
		local, ok := svc.mountOf(target)
		if !ok {
			t.Errorf("%s: TEAMSTER_WORKER_CONFIG %q is not a bind-mounted file", name, target)
			continue
		}
		cfg, err := worker.LoadConfig(local)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if prev, dup := seen[cfg.WorkerID]; dup {
			t.Errorf("%s and %s share workerId %q", prev, name, cfg.WorkerID)
		}
		seen[cfg.WorkerID] = name
		// docs/PROTOCOL.md: workers that host one id advertise the same manifest.
		for _, h := range cfg.Harnesses {
			m, ok := manifests[h.ID]
			if !ok {
				manifests[h.ID] = h.Manifest
				continue
			}
			if d := cmp.Diff(m, h.Manifest); d != "" {
				t.Errorf("%s: harness %s advertises another manifest than the first worker hosting it (-first +this):\n%s", name, h.ID, d)
			}
		}
		// A draining worker must not be killed before its drain timeout.
		grace, err := time.ParseDuration(svc.StopGracePeriod)
		if err != nil || grace <= cfg.DrainTimeout() {
			t.Errorf("%s: stop_grace_period %q, want longer than drainTimeoutMs (%s)", name, svc.StopGracePeriod, cfg.DrainTimeout())
		}
	}
}

// checkNATSURL checks a daemon's NATS settings: TLS URLs naming every node,
// no credentials in them, its own principal's NKey mounted (and only it),
// the deployment's CA, its own inbox prefix; and that those credentials log
// in to the shipped node config.
func checkNATSURL(t *testing.T, s *shipped, svc *composeService, service, role, name string, nodes []string) {
	t.Helper()
	env := svc.Environment
	urls := env["TEAMSTER_NATS_URL"]
	if urls == "" {
		t.Errorf("%s: no TEAMSTER_NATS_URL", service)
		return
	}
	var hosts []string
	for _, raw := range strings.Split(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			t.Errorf("%s: TEAMSTER_NATS_URL: %v", service, err)
			continue
		}
		hosts = append(hosts, u.Hostname())
		if u.Scheme != "tls" {
			t.Errorf("%s: %s: scheme %q, want tls", service, u.Redacted(), u.Scheme)
		}
		if u.User != nil {
			t.Errorf("%s: %s carries credentials; the NKey file is the login", service, u.Redacted())
		}
	}
	sort.Strings(hosts)
	if d := cmp.Diff(nodes, hosts); d != "" {
		t.Errorf("%s: TEAMSTER_NATS_URL hosts (-nats services +hosts):\n%s", service, d)
	}
	p := credentials.Principal{Role: role, Name: name}
	seed, ok := svc.mountOf(env["TEAMSTER_NATS_NKEY"])
	if want := filepath.Join("secrets", "nats", p.ID()+".nk"); !ok || filepath.Clean(seed) != want {
		t.Errorf("%s: TEAMSTER_NATS_NKEY %q is mounted from %q, want %s", service, env["TEAMSTER_NATS_NKEY"], seed, want)
	}
	if ca, ok := svc.mountOf(env["TEAMSTER_NATS_TLS_CA"]); !ok || filepath.Clean(ca) != filepath.Join("secrets", "tls", "ca.pem") {
		t.Errorf("%s: TEAMSTER_NATS_TLS_CA %q is mounted from %q, want secrets/tls/ca.pem", service, env["TEAMSTER_NATS_TLS_CA"], ca)
	}
	for _, m := range svc.Volumes {
		if strings.HasPrefix(filepath.Clean(m.Source), filepath.Join("secrets", "nats")) && filepath.Base(m.Source) != p.ID()+".nk" {
			t.Errorf("%s: mounts another principal's secret %s", service, m.Source)
		}
	}
	if got := env["TEAMSTER_NATS_INBOX_PREFIX"]; got != p.InboxPrefix() {
		t.Errorf("%s: TEAMSTER_NATS_INBOX_PREFIX %q, want %q", service, got, p.InboxPrefix())
	}
	// The generated credentials of that principal log in.
	nc, err := nats.Connect(clientURL(s), connectOpts(t, s, p.ID())...)
	if err != nil {
		t.Errorf("%s: principal %s does not log in: %v", service, p.ID(), err)
		return
	}
	nc.Close()
}

// TestWorkerConfigs checks every worker-*.json here: JSON, a valid worker
// config, its own workerId, and mounted by one compose service.
func TestWorkerConfigs(t *testing.T) {
	files, err := filepath.Glob("worker-*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no worker-*.json: %v", err)
	}
	c := loadCompose(t)
	mounted := map[string]int{}
	for _, name := range c.byRole("worker") {
		for _, m := range c.Services[name].Volumes {
			if m.Type == "bind" {
				mounted[filepath.Clean(m.Source)]++
			}
		}
	}
	// The credentials of each worker reach the queues of the harnesses its
	// config hosts, exactly.
	principals, err := credentials.ComposeSpec().Principals()
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string][]string{}
	for _, p := range principals {
		if p.Role == credentials.RoleWorker {
			granted[p.Name] = p.Harnesses
		}
	}
	ids := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var raw struct {
			WorkerID  string `json:"workerId"`
			Harnesses []struct {
				ID string `json:"id"`
			} `json:"harnesses"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Errorf("%s is not JSON: %v", f, err)
			continue
		}
		if _, err := worker.ParseConfig(b); err != nil {
			t.Errorf("%s is not a valid worker config: %v", f, err)
		}
		if raw.WorkerID == "" {
			t.Errorf("%s has no workerId: each worker of the fleet needs its own", f)
		} else if prev, dup := ids[raw.WorkerID]; dup {
			t.Errorf("%s and %s share workerId %q", prev, f, raw.WorkerID)
		}
		ids[raw.WorkerID] = f
		var hosted []string
		for _, h := range raw.Harnesses {
			hosted = append(hosted, h.ID)
		}
		if g := granted[raw.WorkerID]; !slices.Equal(slices.Sorted(slices.Values(g)), slices.Sorted(slices.Values(hosted))) {
			t.Errorf("%s hosts %v, but the compose credentials of %s reach the queues of %v", f, hosted, raw.WorkerID, g)
		}
		if n := mounted[filepath.Clean(f)]; n != 1 {
			t.Errorf("%s is mounted by %d worker services, want 1", f, n)
		}
	}
}

// TestDockerfile checks what compose.yaml relies on in deploy/Dockerfile:
// static builds of the binaries the services run, installed where their
// commands look, run as a non-root user.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{"FROM golang:1.26", "CGO_ENABLED=0", "COPY --from=build /out/ /usr/local/bin/"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(users) == 0 {
		t.Error("Dockerfile sets no USER: the image would run as root")
	} else if u := users[len(users)-1][1]; u == "root" || u == "0" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root:") {
		t.Errorf("Dockerfile runs as %s", u)
	}
	built := map[string]bool{}
	for _, m := range regexp.MustCompile(`\./cmd/([a-z]+)`).FindAllStringSubmatch(df, -1) {
		built[m[1]] = true
		if _, err := os.Stat(filepath.Join(repoRoot, "cmd", m[1], "main.go")); err != nil {
			t.Errorf("Dockerfile builds ./cmd/%s: %v", m[1], err)
		}
	}
	for _, bin := range []string{"router", "worker", "teamster"} {
		if !built[bin] {
			t.Errorf("Dockerfile does not build ./cmd/%s", bin)
		}
	}
	c := loadCompose(t)
	for name, s := range c.Services {
		if s.Build == nil {
			continue
		}
		if dir, bin := path.Split(s.Command[0]); dir != "/usr/local/bin/" || !built[bin] {
			t.Errorf("%s runs %s, which the image does not install", name, s.Command[0])
		}
	}
}

// TestSingleNodeConfig keeps nats.conf what the README's "by hand"
// instructions need: JetStream, the 8 MiB max_payload, and no users (those
// instructions connect without credentials).
func TestSingleNodeConfig(t *testing.T) {
	o, err := server.ProcessConfigFile("nats.conf")
	if err != nil {
		t.Fatalf("nats.conf does not load: %v", err)
	}
	if o.MaxPayload != bus.ServerMaxPayload || !o.JetStream {
		t.Errorf("nats.conf: max_payload %d, JetStream %t", o.MaxPayload, o.JetStream)
	}
	if len(o.Users) != 0 || len(o.Nkeys) != 0 || o.Username != "" || o.Authorization != "" {
		t.Error("nats.conf requires authentication: the README's by-hand instructions connect without it")
	}
}
