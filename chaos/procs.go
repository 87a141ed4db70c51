package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/internal/natsproc"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// binaries are the programs a fleet runs, built once per suite run.
type binaries struct {
	dir        string
	natsServer string // the nats-server binary; dir's when empty
}

func (b binaries) router() string { return filepath.Join(b.dir, "router") }
func (b binaries) worker() string { return filepath.Join(b.dir, "testworker") }
func (b binaries) nats() string {
	if b.natsServer != "" {
		return b.natsServer
	}
	return filepath.Join(b.dir, "nats-server")
}

// buildBinaries builds cmd/router and internal/testworker (cmd/worker with
// the scripted harness's ledger, which the production worker has no flag
// for) into dir; the nats-server of the module's own go.mod is
// internal/natsproc's build of it (the one the three-node scenarios run
// too).
func buildBinaries(ctx context.Context, dir string) (binaries, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return binaries{}, err
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator), "./cmd/router", "./internal/testworker"}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return binaries{}, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	nats, err := natsproc.Binary()
	if err != nil {
		return binaries{}, err
	}
	return binaries{dir: dir, natsServer: nats}, nil
}

// moduleRoot is the directory of the teamster module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run the chaos suite from inside the teamster module (go run ./chaos)")
	}
	return filepath.Dir(gomod), nil
}

// proc is one daemon process of a fleet. Its output goes to a log file that
// survives restarts (each start appends).
type proc struct {
	name    string
	path    string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit error, once done is closed
}

func newProc(name, path, logPath string, args ...string) *proc {
	return &proc{name: name, path: path, args: args, logPath: logPath}
}

// start starts the process; it fails when it is already running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	f, err := os.OpenFile(p.logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== chaos: start %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The daemons die with the suite, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== chaos: %s exited at %s: %v\n", p.name, time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the process has been started and has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || !p.running() {
		return fmt.Errorf("%s is not running", p.name)
	}
	return cmd.Process.Signal(sig)
}

// wait waits up to timeout for the process to exit and returns its exit code
// (-1 when it died of a signal).
func (p *proc) wait(timeout time.Duration) (int, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return 0, fmt.Errorf("%s was never started", p.name)
	}
	select {
	case <-done:
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s did not exit within %s", p.name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, p.err
}

// kill kills the process with SIGKILL (kill -9) and waits until it is gone.
// Killing a process that is not running does nothing.
func (p *proc) kill() error {
	if !p.running() {
		return nil
	}
	if err := p.signal(syscall.SIGKILL); err != nil && p.running() {
		return err
	}
	_, err := p.wait(10 * time.Second)
	return err
}

// freePort returns a loopback TCP port that was free a moment ago, outside
// the kernel's ephemeral range (redisproc.FreePort), so that no outgoing
// connection takes it before the process given it binds it.
func freePort() (int, error) { return redisproc.FreePort() }

// natsServer is a real nats-server process with JetStream on a file store.
// A restart keeps its port and its store, as a restarted production server
// keeps its JetStream data.
type natsServer struct {
	*proc
	port  int
	store string
}

// startNATS starts nats-server with its store and config in dir.
func startNATS(ctx context.Context, bin, dir string) (*natsServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	store := filepath.Join(dir, "jetstream")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, err
	}
	// max_payload 8 MiB as teamster's servers run (docs/PROTOCOL.md, "Subjects"),
	// so the router, not the bus, refuses oversized bodies.
	conf := filepath.Join(dir, "nats.conf")
	body := "server_name: chaos\nmax_payload: 8MB\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	n := &natsServer{port: port, store: store}
	n.proc = newProc("nats-server", bin, filepath.Join(dir, "nats.log"),
		"-c", conf, "-js", "-sd", store, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := n.startAndWait(ctx); err != nil {
		_ = n.kill()
		return nil, err
	}
	return n, nil
}

// URL is the server's nats:// URL; it stays the same across restarts.
func (n *natsServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Addr is host:port of the server.
func (n *natsServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// startAndWait starts the process and waits until JetStream answers.
func (n *natsServer) startAndWait(ctx context.Context) error {
	if err := n.start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := pingJetStream(ctx, n.URL())
		if err == nil {
			return nil
		}
		if !n.running() {
			return fmt.Errorf("nats-server exited during start-up (see %s): %w", n.logPath, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nats-server not ready: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func pingJetStream(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err
}
