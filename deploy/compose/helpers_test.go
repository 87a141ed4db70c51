package compose

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/teamster-fleet/teamster/internal/credentials"
)

// The shipped files, relative to this directory (tests run in it).
const (
	nodeConfig  = "nats-1.conf"
	composeFile = "compose.yaml"
	repoRoot    = "../.."
	// secretsMount is where compose mounts the generated secrets in a NATS
	// container; the tests put their own generated directory there.
	secretsMount = "/etc/nats/secrets"
)

// testSpec is the compose deployment plus a second gateway, added the way
// the README says to add one: the tests need two gateways to show that
// neither sees the other's traffic.
func testSpec() credentials.Spec {
	s := credentials.ComposeSpec()
	s.Gateways = append(s.Gateways, "gateway-2")
	s.Delegates = append(s.Delegates, "voice-call@gateway-2")
	return s
}

// waitFor bounds every wait in these tests: a liveness bound, not a timing
// assertion.
const waitFor = 30 * time.Second

// shipped is a NATS server running a shipped node config with credentials
// generated for the test, and where they are.
type shipped struct {
	*server.Server
	creds *credentials.Layout
}

// generated generates the test deployment's credentials into a temp dir
// laid out as compose mounts it (<dir>/secrets), and copies the shipped node
// config beside it, its secrets paths pointing there. It returns the copy.
func generated(t testing.TB, node string) (string, *credentials.Layout) {
	t.Helper()
	dir := t.TempDir()
	l, err := credentials.Generate(filepath.Join(dir, "secrets"), testSpec())
	if err != nil {
		t.Fatalf("teamster credentials: %v", err)
	}
	conf, err := os.ReadFile(node)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(node))
	body := strings.ReplaceAll(string(conf), secretsMount, filepath.Join(dir, "secrets"))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, l
}

// loadNodeOptions loads a node config (and through its include, the
// generated accounts and permissions) and makes it runnable in a test: a
// random loopback port, the store in a temp dir, no cluster, no monitoring
// port. Everything else, in particular TLS, the users and their permissions,
// is exactly what the files say.
func loadNodeOptions(t testing.TB, path string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the shipped NATS config %s does not load: %v", path, err)
	}
	if len(opts.Nkeys) == 0 {
		t.Fatalf("the NATS config %s defines no NKey users: is secrets/nats/auth.conf still included?", path)
	}
	if opts.TLSConfig == nil {
		t.Fatalf("the NATS config %s has no TLS", path)
	}
	opts.Host = "127.0.0.1"
	opts.Port = server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.Cluster = server.ClusterOpts{}
	opts.Routes, opts.RoutesStr = nil, ""
	opts.StoreDir = t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	return opts
}

// startShipped starts an in-process NATS server with the shipped node config
// and generated credentials; mutate may adjust the options further (feature
// flags, or a loosened permission).
func startShipped(t testing.TB, mutate ...func(*server.Options, *credentials.Layout)) *shipped {
	t.Helper()
	path, l := generated(t, nodeConfig)
	opts := loadNodeOptions(t, path)
	for _, m := range mutate {
		m(opts, l)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("start nats-server with %s: %v", nodeConfig, err)
	}
	go s.Start()
	if !s.ReadyForConnections(waitFor) {
		s.Shutdown()
		t.Fatalf("nats-server with %s is not ready", nodeConfig)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &shipped{Server: s, creds: l}
}

func clientURL(s *shipped) string {
	return "tls://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Addr().(*net.TCPAddr).Port))
}

// principalOf is the principal of a user name <role>-<name>, or a
// delegate's delegate-<pluginId>@<gatewayId> (Principal.ID).
func principalOf(t testing.TB, user string) credentials.Principal {
	t.Helper()
	role, name, ok := strings.Cut(user, "-")
	if !ok {
		t.Fatalf("user %q is not <role>-<name>", user)
	}
	p := credentials.Principal{Role: role, Name: name}
	if role == credentials.RoleDelegate {
		if p.Name, p.Gateway, ok = strings.Cut(name, "@"); !ok {
			t.Fatalf("delegate %q is not delegate-<pluginId>@<gatewayId>", user)
		}
	}
	return p
}

// connectOpts are how principal user connects: its NKey, the deployment's
// CA, its own inbox prefix.
func connectOpts(t testing.TB, s *shipped, user string) []nats.Option {
	t.Helper()
	p := principalOf(t, user)
	nk, err := nats.NkeyOptionFromSeed(s.creds.NKey(p))
	if err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	return []nats.Option{nk, nats.RootCAs(s.creds.CA), nats.CustomInboxPrefix(p.InboxPrefix()), nats.Name(user)}
}

// violations collects the asynchronous permission errors of one connection.
type violations struct {
	mu   sync.Mutex
	errs []error
	ch   chan error
}

func newViolations() *violations { return &violations{ch: make(chan error, 1024)} }

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	v.mu.Lock()
	v.errs = append(v.errs, err)
	v.mu.Unlock()
	select {
	case v.ch <- err:
	default:
	}
}

func (v *violations) all() []error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]error(nil), v.errs...)
}

// principal is a logged-in connection and the permission errors it received.
type principal struct {
	user string
	nc   *nats.Conn
	v    *violations
}

// login connects as user (<role>-<name>) with its generated NKey; the
// connection closes when the test ends.
func login(t testing.TB, s *shipped, user string) *principal {
	t.Helper()
	v := newViolations()
	opts := append(connectOpts(t, s, user), nats.ErrorHandler(v.handler), nats.MaxReconnects(0))
	nc, err := nats.Connect(clientURL(s), opts...)
	if err != nil {
		t.Fatalf("log in as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return &principal{user: user, nc: nc, v: v}
}

// noViolations fails the test when any principal received a permission error:
// the code did something its principal may not.
func noViolations(t testing.TB, ps ...*principal) {
	t.Helper()
	for _, p := range ps {
		for _, err := range p.v.all() {
			t.Errorf("%s: %v", p.user, err)
		}
	}
}

// probe opens a fresh connection as user (so that no earlier error is in the
// way), runs op, flushes, and returns the permission error the server sent
// for it, or nil. The server answers a forbidden PUB or SUB with -ERR before
// the PONG of the flush, so after Flush the outcome is known; the error is
// also checked to arrive through nats.ErrorHandler.
func probe(t testing.TB, s *shipped, user string, op func(nc *nats.Conn) error) error {
	t.Helper()
	p := login(t, s, user)
	defer p.nc.Close()
	if err := op(p.nc); err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	if err := p.nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("%s: flush: %v", user, err)
	}
	err := p.nc.LastError()
	if err == nil {
		return nil
	}
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("%s: unexpected error %v", user, err)
	}
	select {
	case herr := <-p.v.ch:
		if herr.Error() != err.Error() {
			t.Fatalf("%s: ErrorHandler got %v, LastError is %v", user, herr, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: %v did not reach the ErrorHandler", user, err)
	}
	return err
}

func publishOp(subject string) func(*nats.Conn) error {
	return func(nc *nats.Conn) error { return nc.Publish(subject, []byte(`{"v":1}`)) }
}

func subscribeOp(subject, queue string) func(*nats.Conn) error {
	return func(nc *nats.Conn) error {
		_, err := nc.QueueSubscribeSync(subject, queue)
		return err
	}
}

// mismatches checks every rule of user and returns, in the server's own
// words, each one that does not hold.
func mismatches(t testing.TB, s *shipped, user string, publish, subscribe []rule) []string {
	t.Helper()
	var out []string
	for _, r := range publish {
		out = append(out, mismatch(user, "publish", r, probe(t, s, user, publishOp(r.subject)))...)
	}
	for _, r := range subscribe {
		out = append(out, mismatch(user, "subscribe", r, probe(t, s, user, subscribeOp(r.subject, r.queue)))...)
	}
	return out
}

func mismatch(user, verb string, r rule, err error) []string {
	what := fmt.Sprintf("%s may %s %q", user, verb, r.subject)
	if r.queue != "" {
		what += " in queue group " + r.queue
	}
	switch {
	case r.allowed && err != nil:
		return []string{fmt.Sprintf("%s: want allowed, got %v", what, err)}
	case !r.allowed && err == nil:
		return []string{fmt.Sprintf("%s: want a permissions violation, got none", what)}
	case !r.allowed && !strings.Contains(err.Error(), r.subject):
		return []string{fmt.Sprintf("%s: the violation %q does not name the subject", what, err)}
	}
	return nil
}

// publicKey is the public NKey of principal p.
func publicKey(t testing.TB, l *credentials.Layout, p credentials.Principal) string {
	t.Helper()
	seed, err := os.ReadFile(l.NKey(p))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
