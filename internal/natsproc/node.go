package natsproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Name is the node's server name (n1, n2, ...).
func (nd *Node) Name() string { return nd.name }

// Index is the node's index in its cluster.
func (nd *Node) Index() int { return nd.idx }

// URL is the node's nats:// client URL; it stays the same across restarts.
func (nd *Node) URL() string { return "nats://" + nd.Addr() }

// Addr is the node's client host:port.
func (nd *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.port)) }

// Port is the node's client port.
func (nd *Node) Port() int { return nd.port }

// MonitorURL is the base http:// URL of the node's monitoring endpoints
// (/healthz, /varz, /jsz, ...).
func (nd *Node) MonitorURL() string { return fmt.Sprintf("http://127.0.0.1:%d", nd.mport) }

// Dir is the node's directory: nats.conf, log.txt, and the JetStream store
// under jetstream/.
func (nd *Node) Dir() string { return nd.dir }

// LogPath is the node's log file; every start appends to it.
func (nd *Node) LogPath() string { return nd.logPath }

// Running reports whether the node's process has been started and has not
// exited.
func (nd *Node) Running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.runningLocked()
}

func (nd *Node) runningLocked() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

// Start starts the node's process (on its ports and its store) and waits
// until it accepts client connections. It fails when the node runs already.
func (nd *Node) Start() error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.runningLocked() {
		return fmt.Errorf("natsproc: %s is already running", nd.name)
	}
	f, err := os.OpenFile(nd.logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== natsproc: start %s at %s\n", nd.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(nd.bin, "-c", nd.cfgPath)
	cmd.Stdout, cmd.Stderr = f, f
	// The servers die with the process that started them, whatever happens
	// to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("natsproc: start %s: %w", nd.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== natsproc: %s exited at %s: %v\n", nd.name, time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		close(done)
	}()
	nd.cmd, nd.done = cmd, done
	if err := waitListening(nd.Addr(), done, startTimeout); err != nil {
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(nd.logPath)
		err = fmt.Errorf("natsproc: %s on port %d: %w\n%s", nd.name, nd.port, err, tail(log, 3000))
		if strings.Contains(string(tail(log, 3000)), "address already in use") {
			err = fmt.Errorf("%w: %w", errBind, err)
		}
		return err
	}
	return nil
}

// waitListening waits until addr accepts a TCP connection, the process
// exits (exited closes), or timeout passes.
func waitListening(addr string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return poll(ctx, func() error {
		select {
		case <-exited:
			return backoff.Permanent(errors.New("exited during start-up"))
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return err
		}
		conn.Close()
		return nil
	})
}

// Kill kills the node with SIGKILL (a crash: no lame duck, no flush) and
// waits for it to exit. Killing a node that is not running does nothing.
func (nd *Node) Kill() error { return nd.signalAndWait(syscall.SIGKILL) }

// Stop shuts the node down gracefully (SIGTERM) and waits for it to exit.
func (nd *Node) Stop() error { return nd.signalAndWait(syscall.SIGTERM) }

func (nd *Node) signalAndWait(sig syscall.Signal) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if !nd.runningLocked() {
		return nil
	}
	_ = nd.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	if err := nd.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-nd.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = nd.cmd.Process.Kill()
		<-nd.done
		return fmt.Errorf("natsproc: %s did not exit on %v within 30s; killed", nd.name, sig)
	}
}

// Restart kills the node when it runs, then starts it again on the same
// ports and store. Its JetStream replicas catch up from the others (wait
// with WaitHealthy or the cluster's WaitReady).
func (nd *Node) Restart() error {
	if err := nd.Kill(); err != nil {
		return err
	}
	return nd.Start()
}

// Pause stops the process with SIGSTOP: its connections stay open and it
// answers nothing, as in a long GC pause or a frozen VM.
func (nd *Node) Pause() error { return nd.signal(syscall.SIGSTOP) }

// Resume continues a paused node with SIGCONT.
func (nd *Node) Resume() error { return nd.signal(syscall.SIGCONT) }

func (nd *Node) signal(sig syscall.Signal) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if !nd.runningLocked() {
		return fmt.Errorf("natsproc: %s is not running", nd.name)
	}
	return nd.cmd.Process.Signal(sig)
}

// Healthy reports nil when the node's /healthz answers 200, else why not.
func (nd *Node) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, nd.MonitorURL()+"/healthz", nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /healthz: %d %s", nd.name, res.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// WaitHealthy waits until the node's /healthz answers 200 (see the
// cluster's WaitReady), or ctx ends.
func (nd *Node) WaitHealthy(ctx context.Context) error {
	err := poll(ctx, func() error {
		if !nd.Running() {
			return backoff.Permanent(fmt.Errorf("%s is not running", nd.name))
		}
		return nd.Healthy(ctx)
	})
	if err != nil {
		return fmt.Errorf("natsproc: %s not ready: %w", nd.name, err)
	}
	return nil
}
