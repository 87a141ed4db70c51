// Package redisproc runs a real redis-server process on a free loopback port:
// what `teamster dev` starts when no Redis is configured, and what the tests
// talk to. It can be stopped, killed, paused and restarted.
//
// It also runs replicated topologies of real processes for the tests and the
// chaos suite: a primary with replicas under three Sentinels (sentinel.go), a
// three-shard Redis Cluster (cluster.go), and the proxy both put in front of
// a primary to freeze its replication (proxy.go).
package redisproc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	opts Options
	tls  *tls.Config // what clients use, when opts.TLS is set
	cmd  *exec.Cmd
	done chan struct{}
}

// Options are what StartWith adds to a plain Start.
type Options struct {
	// Port is the port to listen on; 0 picks a free one.
	Port int
	// ConfigFile, when set, is the configuration file redis-server reads
	// first (the command-line arguments override it). A Sentinel needs
	// one it can rewrite.
	ConfigFile string
	// Sentinel runs the process as a Sentinel (redis-server <ConfigFile>
	// --sentinel); it needs ConfigFile.
	Sentinel bool
	// Args are extra redis-server arguments, e.g. "--replicaof", "127.0.0.1",
	// "6380". They come after the defaults, which they override.
	Args []string
	// Username and Password are what the start-up check and Client
	// authenticate with, for a server whose Args require it.
	Username, Password string
	// TLS, when set, makes the server listen with TLS only, on its port.
	TLS *TLS
}

// TLS are the certificate files of a server that speaks TLS only. The
// server also uses them for its own outgoing links (replication, cluster
// bus, Sentinel to its peers), so they must be valid for 127.0.0.1 as a
// server and as a client.
type TLS struct {
	CAFile   string // the CA that signed every certificate; servers and clients trust it
	CertFile string // the server's certificate (PEM)
	KeyFile  string // its key (PEM)
	// ClientCertFile and ClientKeyFile, when set, are the certificate that
	// Client and the start-up check present; the server then requires one
	// from every client (tls-auth-clients yes). Unset, it requires none.
	ClientCertFile, ClientKeyFile string
}

// args are the redis-server arguments that turn TLS on for port.
func (t *TLS) args(port int) []string {
	auth := "no"
	if t.ClientCertFile != "" {
		auth = "yes"
	}
	return []string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", t.CertFile,
		"--tls-key-file", t.KeyFile,
		"--tls-ca-cert-file", t.CAFile,
		"--tls-auth-clients", auth,
		"--tls-replication", "yes",
	}
}

// ClientConfig is the TLS configuration of a client of the server: it
// trusts CAFile and presents the client certificate when there is one.
func (t *TLS) ClientConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", t.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if t.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Start starts redis-server on a free loopback port with its files in dir.
// It fails when redis-server is not installed (run `make deps`).
func Start(dir string) (*Redis, error) { return StartWith(dir, Options{}) }

// StartWith starts redis-server as Start does, with the extra settings of o.
func StartWith(dir string, o Options) (*Redis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (run `make deps`): %w", err)
	}
	if o.Sentinel && o.ConfigFile == "" {
		return nil, errors.New("a Sentinel needs a ConfigFile")
	}
	r := &Redis{dir: dir, opts: o}
	if o.TLS != nil {
		var err error
		if r.tls, err = o.TLS.ClientConfig(); err != nil {
			return nil, fmt.Errorf("redis-server TLS: %w", err)
		}
	}
	if o.Port != 0 {
		r.port = o.Port
		if err := r.start(); err != nil {
			return nil, err
		}
		return r, nil
	}
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

// URL is the redis:// address of the server (rediss:// with TLS), without
// credentials.
func (r *Redis) URL() string {
	if r.opts.TLS != nil {
		return fmt.Sprintf("rediss://127.0.0.1:%d/0", r.port)
	}
	return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port)
}

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
	var args []string
	if r.opts.ConfigFile != "" {
		args = append(args, r.opts.ConfigFile)
	}
	if r.opts.Sentinel {
		args = append(args, "--sentinel")
	}
	args = append(args,
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
	if r.opts.TLS != nil {
		args = append(args, r.opts.TLS.args(r.port)...)
	}
	args = append(args, r.opts.Args...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	if err := waitRedis(r.options(), done, 10*time.Second); err != nil {
		_ = cmd.Process.Kill()
		<-done
		r.cmd = nil
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("redis-server on port %d: %w\n%s", r.port, err, tail(log, 2000))
	}
	return nil
}

// waitRedis waits until the server of opts answers PING.
func waitRedis(opts *redis.Options, exited <-chan struct{}, timeout time.Duration) error {
	opts.MaxRetries, opts.DialTimeout = -1, 200*time.Millisecond
	c := redis.NewClient(opts)
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
func (r *Redis) Client() *redis.Client { return redis.NewClient(r.options()) }

// options are the client options for the server: its address, and the
// credentials and TLS configuration of its Options.
func (r *Redis) options() *redis.Options {
	return &redis.Options{Addr: r.Addr(), Username: r.opts.Username, Password: r.opts.Password, TLSConfig: r.tls}
}

// Running reports whether the process runs (it is not stopped or killed).
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil
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

// pollUntil calls f every 50ms until it returns nil or ctx ends; then the
// error names what it waited for and f's last answer.
func pollUntil(ctx context.Context, what string, f func(ctx context.Context) error) error {
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// infoField is one field of one INFO section, as go-redis parses INFO.
func infoField(ctx context.Context, c redis.Cmdable, section, field string) (string, error) {
	info, err := c.InfoMap(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, fields := range info { // one section: its name's case varies
		if v, ok := fields[field]; ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s", section, field)
}

// role is the first element of the server's ROLE reply: master, slave or
// sentinel.
func role(ctx context.Context, c *redis.Client) (string, error) {
	reply, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(reply) == 0 {
		return "", errors.New("empty ROLE reply")
	}
	r, ok := reply[0].(string)
	if !ok {
		return "", fmt.Errorf("ROLE reply starts with %T", reply[0])
	}
	return r, nil
}
