package compose

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The shipped files, relative to this directory (tests run in it).
const (
	nodeConfig     = "nats-1.conf"
	accountsConfig = "nats-accounts.conf"
	composeFile    = "compose.yaml"
	repoRoot       = "../.."
)

// The development passwords of nats-accounts.conf. The compose test checks
// that compose.yaml's URLs carry the same ones.
var passwords = map[string]string{
	"gateway":             "dev-gateway-password-CHANGE-ME",
	"delegate-voice-call": "dev-delegate-voice-call-password-CHANGE-ME",
	"router":              "dev-router-password-CHANGE-ME",
	"worker":              "dev-worker-password-CHANGE-ME",
	"operator":            "dev-operator-password-CHANGE-ME",
}

// waitFor bounds every wait in these tests: a liveness bound, not a timing
// assertion.
const waitFor = 30 * time.Second

// loadNodeOptions loads a shipped node config (and through its include, the
// shipped accounts and permissions) and makes it runnable in a test: a random
// loopback port, the store in a temp dir, no cluster, no monitoring port.
// Everything else, in particular the accounts, users and permissions, is
// exactly what the file says.
func loadNodeOptions(t testing.TB, path string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the shipped NATS config %s does not load: %v", path, err)
	}
	if len(opts.Users) == 0 {
		t.Fatalf("the shipped NATS config %s defines no users: is %s still included?", path, accountsConfig)
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

// startShipped starts an in-process NATS server with the shipped node config;
// mutate may adjust the options further (feature flags).
func startShipped(t testing.TB, mutate ...func(*server.Options)) *server.Server {
	t.Helper()
	opts := loadNodeOptions(t, nodeConfig)
	for _, m := range mutate {
		m(opts)
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
	return s
}

func clientURL(s *server.Server) string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Addr().(*net.TCPAddr).Port))
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

// login connects as user with its development password; the connection closes
// when the test ends.
func login(t testing.TB, s *server.Server, user string) *principal {
	t.Helper()
	pw, ok := passwords[user]
	if !ok {
		t.Fatalf("no password for principal %q", user)
	}
	return loginWith(t, s, user, pw)
}

func loginWith(t testing.TB, s *server.Server, user, password string) *principal {
	t.Helper()
	v := newViolations()
	nc, err := nats.Connect(clientURL(s), nats.UserInfo(user, password), nats.Name(user),
		nats.ErrorHandler(v.handler), nats.MaxReconnects(0))
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
func probe(t testing.TB, s *server.Server, user string, op func(nc *nats.Conn) error) error {
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

// canPublish and canSubscribe assert one permission either way, with the
// server's own wording on failure.
func canPublish(t *testing.T, s *server.Server, user, subject string, want bool) {
	t.Helper()
	err := probe(t, s, user, publishOp(subject))
	checkPermission(t, user, "publish", subject, "", err, want)
}

func canSubscribe(t *testing.T, s *server.Server, user, subject, queue string, want bool) {
	t.Helper()
	err := probe(t, s, user, subscribeOp(subject, queue))
	checkPermission(t, user, "subscribe", subject, queue, err, want)
}

func checkPermission(t *testing.T, user, verb, subject, queue string, err error, want bool) {
	t.Helper()
	what := fmt.Sprintf("%s may %s %q", user, verb, subject)
	if queue != "" {
		what += " in queue group " + queue
	}
	switch {
	case want && err != nil:
		t.Errorf("%s: want allowed, got %v", what, err)
	case !want && err == nil:
		t.Errorf("%s: want a permissions violation, got none", what)
	case !want && !strings.Contains(err.Error(), subject):
		t.Errorf("%s: the violation %q does not name the subject", what, err)
	}
}
