package claude

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// baseArgs start the CLI in stream-json mode: prompts and steered input as
// user lines on stdin, every event as a line on stdout, partial messages
// (the API's stream events) included, each user line acknowledged by
// command_lifecycle lines (--replay-user-messages), and no permission prompt
// ever waiting for a person (--permission-prompts none: anything that would
// prompt is denied).
var baseArgs = []string{
	"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
	"--include-partial-messages", "--replay-user-messages", "--permission-prompts", "none",
}

// exitGrace is how long the CLI may take to exit on its own once its stdin
// closed, before it is killed.
const exitGrace = 10 * time.Second

// errClosed says stdin is closed: nothing more can be written.
var errClosed = errors.New("the claude process's stdin is closed")

// process is one running CLI: one turn.
type process struct {
	cmd *exec.Cmd
	pid int
	log logrus.FieldLogger

	wmu    sync.Mutex // one line at a time on stdin
	stdin  io.WriteCloser
	closed bool

	lines  chan []byte   // stdout lines; closed at EOF
	done   chan struct{} // closed once the process has exited and been reaped
	stderr *nativecli.StderrLogger
	exit   error
}

// startProcess starts the CLI with args, env and dir.
func startProcess(binary string, args, env []string, dir string, log logrus.FieldLogger) (*process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = nativecli.SysProcAttr() // a process group of its own
	cmd.WaitDelay = exitGrace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := nativecli.NewStderrLogger(log) // a line at a time, at debug level
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, log: log.WithField("pid", cmd.Process.Pid), stdin: stdin,
		lines: make(chan []byte, 64), done: make(chan struct{}), stderr: stderr}
	stderr.SetLog(p.log)
	go p.read(stdout)
	return p, nil
}

// read relays stdout a line at a time, then reaps the process: once stdout
// ends the process (and whatever it started) is killed and waited for.
func (p *process) read(stdout io.Reader) {
	r := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			p.lines <- line
		}
		if err != nil {
			break
		}
	}
	close(p.lines)
	err := p.cmd.Wait()
	nativecli.KillGroup(p.cmd) // what the CLI started dies with it
	p.exit = err
	close(p.done)
}

// write writes one JSON line on stdin. check, when set, runs under the write
// lock immediately before the write; false writes nothing (errRefused).
func (p *process) write(v any, check func() bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.closed {
		return errClosed
	}
	if check != nil && !check() {
		return errRefused
	}
	if _, err := p.stdin.Write(b); err != nil {
		return fmt.Errorf("write to the claude process: %w", err)
	}
	return nil
}

// errRefused says a write's check said no.
var errRefused = errors.New("the write's check refused it")

// closeIf runs cond under the write lock and closes stdin when it says so:
// no write can slip in between the decision and the close.
func (p *process) closeIf(cond func() bool) bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if !cond() {
		return false
	}
	if !p.closed {
		p.closed = true
		_ = p.stdin.Close()
	}
	return true
}

// closeInput closes stdin: the CLI finishes what it has read and exits.
// Nothing can be written afterwards.
func (p *process) closeInput() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if !p.closed {
		p.closed = true
		_ = p.stdin.Close()
	}
}

// kill kills the process group at once.
func (p *process) kill() { nativecli.KillGroup(p.cmd) }

// exitReason describes how the process ended, once done is closed.
func (p *process) exitReason() string {
	s := "exit status 0"
	if p.exit != nil {
		s = p.exit.Error()
	}
	if last := p.stderr.Last(); last != "" {
		s += "; stderr: " + last
	}
	return s
}
