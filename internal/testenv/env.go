// Package testenv starts the real servers teamster's tests talk to: a
// redis-server process on a free port in a temp dir, and a NATS server with
// JetStream embedded in this process. Both can be stopped, killed, paused and
// restarted by fault tests. Nothing here fakes either server.
package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// Redis is a redis-server process (see redisproc).
type Redis = redisproc.Redis

// StartRedis starts a redis-server process with its files in dir.
func StartRedis(dir string) (*Redis, error) { return redisproc.Start(dir) }

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) { return redisproc.FreePort() }

// Env is one test binary's servers: a redis-server process and an embedded NATS.
type Env struct {
	Redis *Redis
	NATS  *NATS
	dir   string
}

// Start starts both servers in a new temp dir. Call it from TestMain and Close
// the Env when the tests are done.
func Start() (*Env, error) {
	dir, err := os.MkdirTemp("", "teamster-test-")
	if err != nil {
		return nil, err
	}
	e := &Env{dir: dir}
	if err := os.MkdirAll(dir+"/redis", 0o755); err != nil {
		return nil, err
	}
	if e.Redis, err = StartRedis(dir + "/redis"); err != nil {
		e.Close()
		return nil, err
	}
	if e.NATS, err = StartNATS(dir + "/jetstream"); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close stops both servers and removes their files.
func (e *Env) Close() {
	if e.NATS != nil {
		e.NATS.Stop()
	}
	if e.Redis != nil {
		_ = e.Redis.Kill()
	}
	_ = os.RemoveAll(e.dir)
}

// Main is the usual body of a package's TestMain: it runs the test binary's
// tests and exits the process with their code. With env not nil, the tests
// share an Env in *env, started before them and closed after them; pass nil
// when the package's tests start their own servers (NewNATS, NewRedis,
// internal/fleettest).
//
// When the tests passed, Main then fails the binary if they left a goroutine
// running (CheckLeaks): a router, worker or client that does not end what it
// started would otherwise go unnoticed until a long-lived process runs out
// of something.
func Main(m *testing.M, env **Env) {
	var e *Env
	if env != nil {
		var err error
		if e, err = Start(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv:", err)
			os.Exit(1)
		}
		*env = e
	}
	code := m.Run()
	if e != nil {
		e.Close()
	}
	if code == 0 {
		if err := CheckLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: the tests passed but left goroutines running:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// FlushRedis empties Redis for a test that wants a clean server, failing the
// test when it cannot.
func (e *Env) FlushRedis(t testing.TB) {
	t.Helper()
	if err := e.Redis.Flush(context.Background()); err != nil {
		t.Fatalf("flush redis: %v", err)
	}
}

// NewRedis starts a private redis-server for one test, for fault tests that
// stop, kill or pause it without disturbing the others. It is killed when the
// test ends.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	r, err := StartRedis(t.TempDir())
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	return r
}

// NewNATS starts a private embedded NATS server for one test. It is shut down
// when the test ends.
func NewNATS(t testing.TB) *NATS {
	t.Helper()
	n, err := StartNATS(t.TempDir())
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

// JetStream connects a client to n for one test (closed when the test ends)
// and returns it with its JetStream context.
func (n *NATS) JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := n.Connect(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
