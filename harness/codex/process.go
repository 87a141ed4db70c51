package codex

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// appServerArgs start the app-server on stdio. thread_unload_delay_secs=0
// makes a thread the harness unsubscribes from unload at once, releasing its
// writer lock in CODEX_HOME, so that the session's next turn can resume it on
// any worker the moment this turn's lease is released. (The default keeps an
// idle thread loaded for about a minute, and another process resuming it
// meanwhile is refused: "thread ... already has an active writer".)
var appServerArgs = []string{"app-server", "--listen", "stdio://", "-c", "thread_unload_delay_secs=0"}

// clientName is the clientInfo name of the handshake. The app-server uses it
// as the first part of its userAgent and as the threads' originator.
const clientName = "teamster"

// clientVersion is the clientInfo version of the handshake.
const clientVersion = "1"

// handshakeTimeout bounds starting the process and the initialize handshake.
const handshakeTimeout = 30 * time.Second

// closeGrace is how long a closed process may take to exit on its own after
// its stdin closed, before it is killed.
const closeGrace = 2 * time.Second

// quietNotifications are notifications the harness does not use; the
// app-server is asked not to send them (initialize's
// optOutNotificationMethods). rawResponseItem/completed in particular
// repeats every item of every model request, instructions included.
var quietNotifications = []string{
	"rawResponseItem/completed",
	"account/rateLimits/updated",
	"thread/readState/changed",
	"remoteControl/status/changed",
}

// process is one running app-server with its connection.
type process struct {
	cmd     *exec.Cmd
	conn    *conn
	pid     int
	version version
	log     logrus.FieldLogger

	closeOnce sync.Once
	stdin     io.Closer
	done      chan struct{} // closed once the process has exited and been reaped
	exitErr   error
}

// processParams are what starting a process needs.
type processParams struct {
	settings *settings
	log      logrus.FieldLogger
	trace    traceFunc
}

// startProcess starts an app-server and completes the handshake: initialize
// (experimental API on, the notifications it does not use off), the version
// check, then the initialized notification. A process that fails any step
// is killed before startProcess returns.
func startProcess(ctx context.Context, p processParams) (*process, error) {
	s := p.settings
	if err := checkBinary(s.Binary); err != nil {
		return nil, err
	}
	cmd := exec.Command(s.Binary, appServerArgs...)
	cmd.Env = s.environ()
	cmd.Dir = s.Cwd
	cmd.SysProcAttr = nativecli.SysProcAttr()
	cmd.WaitDelay = closeGrace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// stderr is logged a line at a time, at debug level.
	cmd.Stderr = nativecli.NewStderrLogger(p.log)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the codex app-server %s: %w", s.Binary, err)
	}
	log := p.log.WithField("pid", cmd.Process.Pid)
	pr := &process{cmd: cmd, pid: cmd.Process.Pid, log: log, stdin: stdin, done: make(chan struct{})}
	pr.conn = newConn(stdin, stdout, log, p.trace)
	go pr.reap()

	if err := pr.handshake(ctx, s.MinVersion); err != nil {
		pr.kill()
		<-pr.done
		return nil, err
	}
	log.WithField("version", pr.version.String()).Info("codex: app-server ready")
	return pr, nil
}

// initializeParams and initializeResult are the handshake.
type (
	initializeParams struct {
		ClientInfo   clientInfo   `json:"clientInfo"`
		Capabilities capabilities `json:"capabilities"`
	}
	clientInfo struct {
		Name    string `json:"name"`
		Title   string `json:"title"`
		Version string `json:"version"`
	}
	capabilities struct {
		ExperimentalAPI           bool     `json:"experimentalApi"`
		OptOutNotificationMethods []string `json:"optOutNotificationMethods,omitempty"`
	}
	initializeResult struct {
		UserAgent string `json:"userAgent"`
		CodexHome string `json:"codexHome"`
	}
)

func (p *process) handshake(ctx context.Context, minVersion string) error {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	var res initializeResult
	err := p.conn.call(ctx, "initialize", initializeParams{
		ClientInfo:   clientInfo{Name: clientName, Title: "teamster worker", Version: clientVersion},
		Capabilities: capabilities{ExperimentalAPI: true, OptOutNotificationMethods: quietNotifications},
	}, &res)
	if err != nil {
		return fmt.Errorf("codex app-server handshake (initialize): %w", err)
	}
	v, err := checkVersion(res.UserAgent, minVersion)
	if err != nil {
		return err
	}
	p.version = v
	if err := p.conn.notify("initialized", nil); err != nil {
		return fmt.Errorf("codex app-server handshake (initialized): %w", err)
	}
	return nil
}

// reap waits for the output to end, makes sure the process (and anything it
// started) is gone, and reaps it.
func (p *process) reap() {
	<-p.conn.Done()
	p.kill()
	err := p.cmd.Wait()
	p.exitErr = err
	close(p.done)
}

// Done is closed once the process has exited.
func (p *process) Done() <-chan struct{} { return p.done }

// exitReason describes how the process ended, once Done is closed.
func (p *process) exitReason() string {
	if p.exitErr != nil {
		return p.exitErr.Error()
	}
	return "exit status 0"
}

// close ends the process: stdin closes (the app-server exits on EOF), and
// whatever still runs after closeGrace is killed.
func (p *process) close() {
	p.closeOnce.Do(func() { _ = p.stdin.Close() })
	select {
	case <-p.done:
	case <-time.After(closeGrace):
		p.kill()
		<-p.done
	}
}

// kill kills the process and its process group at once: the app-server runs
// in a process group of its own (and on Linux dies with the worker), so that
// the commands it runs die with it.
func (p *process) kill() {
	nativecli.KillGroup(p.cmd)
}

// isUnanswered reports whether err says a request was sent but its outcome is
// unknown.
func isUnanswered(err error) bool {
	var u *errUnanswered
	return errors.As(err, &u)
}
