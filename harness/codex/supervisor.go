package codex

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sirupsen/logrus"
)

// The supervisor keeps one app-server process for its harness (one per
// worker and harness entry) and restarts it when it dies:
//
//	idle ──first acquire──▶ starting ──handshake ok──▶ ready ──process exits──▶ backoff ──▶ starting
//	                            │                                                 ▲
//	                            └──────────── start failed (binary, version) ─────┘
//
// It starts on the first acquire, not when the worker is built, so a worker
// that never runs a codex turn never starts codex. While a start is under way
// acquire waits for it; while the supervisor backs off after a failed start,
// acquire returns that failure at once (a turn fails fast rather than waiting
// out the backoff); after a crash of a healthy process it waits for the
// restart. Turns that ran on a process that died are not replayed: they end
// harness_failed (see turn.go). Restarts back off exponentially from
// restartInitial to restartMax; a process that stayed up for healthyAfter
// resets the backoff.
type supervisor struct {
	p supervisorParams

	mu       sync.Mutex
	started  bool
	cur      *process      // the ready process, nil when none
	startErr error         // the last failed start, while backing off
	changed  chan struct{} // closed and replaced on every change of cur or startErr
	closed   bool

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// supervisorParams configure a supervisor.
type supervisorParams struct {
	start func(ctx context.Context) (*process, error)
	log   logrus.FieldLogger

	restartInitial time.Duration
	restartMax     time.Duration
	healthyAfter   time.Duration
}

// Restart backoff defaults.
const (
	defaultRestartInitial = 200 * time.Millisecond
	defaultRestartMax     = 30 * time.Second
	defaultHealthyAfter   = time.Minute
)

// errHarnessClosed is acquire's error after shutdown.
var errHarnessClosed = errors.New("the codex harness is closed")

func newSupervisor(p supervisorParams) *supervisor {
	if p.restartInitial <= 0 {
		p.restartInitial = defaultRestartInitial
	}
	if p.restartMax <= 0 {
		p.restartMax = defaultRestartMax
	}
	if p.healthyAfter <= 0 {
		p.healthyAfter = defaultHealthyAfter
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &supervisor{p: p, changed: make(chan struct{}), ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// acquire returns the ready process, starting the supervisor on first use.
func (s *supervisor) acquire(ctx context.Context) (*process, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errHarnessClosed
		}
		if !s.started {
			s.started = true
			go s.loop()
		}
		if p := s.cur; p != nil {
			select {
			case <-p.Done():
			default:
				s.mu.Unlock()
				return p, nil
			}
		}
		if err := s.startErr; err != nil {
			s.mu.Unlock()
			return nil, err
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return nil, errHarnessClosed
		}
	}
}

func (s *supervisor) set(p *process, err error) {
	s.mu.Lock()
	s.cur, s.startErr = p, err
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// loop starts the process, waits for it to die, backs off, and starts it
// again, until shutdown.
func (s *supervisor) loop() {
	defer close(s.done)
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(s.p.restartInitial),
		backoff.WithMaxInterval(s.p.restartMax), backoff.WithMaxElapsedTime(0))
	for {
		s.set(nil, nil) // a start is under way: acquire waits for it
		p, err := s.p.start(s.ctx)
		if s.ctx.Err() != nil {
			if p != nil {
				p.close()
			}
			s.set(nil, errHarnessClosed)
			return
		}
		if err != nil {
			s.p.log.WithError(err).Warn("codex: the app-server did not start")
			s.set(nil, err)
		} else {
			s.set(p, nil)
			up := time.Now()
			select {
			case <-p.Done():
				s.set(nil, nil) // a restart follows: acquire waits for it
				s.p.log.WithFields(logrus.Fields{"pid": p.pid, "exit": p.exitReason(), "uptime": time.Since(up).Round(time.Millisecond).String()}).
					Warn("codex: the app-server exited; restarting it")
				if time.Since(up) >= s.p.healthyAfter {
					bo.Reset()
				}
			case <-s.ctx.Done():
				p.close()
				s.set(nil, errHarnessClosed)
				return
			}
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			s.set(nil, errHarnessClosed)
			return
		}
	}
}

// shutdown stops the supervisor and closes its process; running turns on it
// end harness_failed.
func (s *supervisor) shutdown() {
	s.mu.Lock()
	s.closed = true
	started := s.started
	s.mu.Unlock()
	s.cancel()
	if started {
		<-s.done
	}
}
