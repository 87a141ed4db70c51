// Package redisproc runs a real redis-server process on a free loopback port:
// what `teamster dev` starts when no Redis is configured, and what the tests
// talk to. It can be stopped, killed, paused and restarted.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server process. It runs without persistence, so a restart
// starts empty, as a crashed production Redis without AOF would.
type Redis struct {
	mu   sync.Mutex
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts redis-server on a free loopback port with its files in dir.
// It fails when redis-server is not installed (run `make deps`).
func Start(dir string) (*Redis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (run `make deps`): %w", err)
	}
	r := &Redis{dir: dir}
	var err error
	for i := 0; i < 5; i++ {
		if r.port, err = FreePort(); err != nil {
			return nil, err
		}
		if err = r.start(); err == nil {
			return r, nil
		}
	}
	return nil, err
}

// URL is the redis:// address of the server.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// Addr is host:port of the server.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// Port is the server's port; it stays the same across restarts.
func (r *Redis) Port() int { return r.port }

func (r *Redis) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return errors.New("redis-server already running")
	}
	logFile := filepath.Join(r.dir, fmt.Sprintf("redis-%d.log", r.port))
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", logFile,
		"--protected-mode", "yes",
		// As deploy/compose runs Redis: attempt records, whose stored submit
		// reply is over the default 64 bytes, stay listpack-encoded
		// (ARCHITECTURE.md, "Record lifetimes").
		"--hash-max-listpack-value", "1024",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	if err := waitRedis(r.Addr(), done, 10*time.Second); err != nil {
		_ = cmd.Process.Kill()
		<-done
		r.cmd = nil
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("redis-server on port %d: %w\n%s", r.port, err, tail(log, 2000))
	}
	return nil
}

func waitRedis(addr string, exited <-chan struct{}, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return errors.New("exited during start-up")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering PING after %s: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down with SIGTERM and waits for it to exit.
func (r *Redis) Stop() error { return r.signalAndWait(syscall.SIGTERM) }

// Kill kills the server with SIGKILL and waits for it to exit.
func (r *Redis) Kill() error { return r.signalAndWait(syscall.SIGKILL) }

func (r *Redis) signalAndWait(sig syscall.Signal) error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server did not exit on %v within 10s; killed", sig)
	}
}

// Restart starts the server again on the same port, empty (no persistence).
func (r *Redis) Restart() error {
	if err := r.Stop(); err != nil {
		return err
	}
	return r.start()
}

// Start starts a stopped or killed server again on the same port.
func (r *Redis) Start() error { return r.start() }

// Pause stops the process with SIGSTOP: connections stay open and nothing is
// answered, as in a long GC pause or a frozen VM.
func (r *Redis) Pause() error { return r.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (r *Redis) Resume() error { return r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return errors.New("redis-server is not running")
	}
	return r.cmd.Process.Signal(sig)
}

// Client returns a new go-redis client for the server; the caller closes it.
func (r *Redis) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.Addr()})
}

// Flush empties every database, for a test that wants a clean server.
func (r *Redis) Flush(ctx context.Context) error {
	c := r.Client()
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a server this process is about to start. It picks one below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), where the kernel never
// puts the local end of an outgoing connection: a port from Listen(":0")
// comes from that range, and in a make chaos run (2026-12-01) an outgoing
// connection took one between the probe and the server's bind ("address
// already in use"). It never hands out the same port twice in one process.
// Where the range leaves no room below it, it falls back to Listen(":0").
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	if lo, hi := belowEphemeral(); hi > lo {
		for try := 0; try < 200; try++ {
			port := lo + rand.IntN(hi-lo)
			if handedOut[port] {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			l.Close()
			handedOut[port] = true
			return port, nil
		}
	}
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut[port] {
			handedOut[port] = true
			return port, nil
		}
	}
}

var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// lowestPort is the bottom of the range FreePort picks from: above the
// well-known and the usual registered service ports.
const lowestPort = 20000

// belowEphemeral is the range [lo, hi) of ports from lowestPort up to the
// start of the kernel's ephemeral range; empty when it cannot be read.
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first <= lowestPort+1000 {
		return 0, 0
	}
	return lowestPort, first
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
