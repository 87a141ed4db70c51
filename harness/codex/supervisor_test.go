package codex

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// fakeStarts is a supervisor's start function that plays a list of
// outcomes: an error, or a fake process the test can kill.
type fakeStarts struct {
	mu      sync.Mutex
	results []error // nil: a process
	procs   []*process
	calls   int
}

func (f *fakeStarts) start(ctx context.Context) (*process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.calls
	f.calls++
	if i < len(f.results) && f.results[i] != nil {
		return nil, f.results[i]
	}
	p := &process{cmd: &exec.Cmd{}, pid: 1000 + i, done: make(chan struct{})}
	p.stdin = closerFunc(func() error { p.closeOnce2(); return nil })
	f.procs = append(f.procs, p)
	return p, nil
}

// closeOnce2 ends a fake process (close or crash).
func (p *process) closeOnce2() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

var _ io.Closer = closerFunc(nil)

func TestSupervisorRestarts(t *testing.T) {
	refused := errors.New("the codex app-server is version 0.1.0, older than the minimum version 0.171.0")
	f := &fakeStarts{results: []error{refused, nil, nil}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s := newSupervisor(supervisorParams{start: f.start, log: log, restartInitial: 50 * time.Millisecond, restartMax: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The first start fails: the turn gets the failure, and so does the
	// next one while the supervisor backs off (no waiting it out).
	if _, err := s.acquire(ctx); !errors.Is(err, refused) {
		t.Fatalf("first acquire: %v", err)
	}
	if _, err := s.acquire(ctx); !errors.Is(err, refused) {
		t.Fatalf("acquire while backing off: %v", err)
	}
	// After the backoff the next start succeeds.
	var p1 *process
	for p1 == nil {
		p, err := s.acquire(ctx)
		switch {
		case err == nil:
			p1 = p
		case ctx.Err() != nil:
			t.Fatal("no process after the backoff")
		default:
			time.Sleep(5 * time.Millisecond)
		}
	}
	if again, err := s.acquire(ctx); err != nil || again != p1 {
		t.Fatalf("a healthy process is shared: %v %v", again, err)
	}
	// It dies: acquire waits for the restart and gets a new process.
	p1.closeOnce2()
	p2, err := s.acquire(ctx)
	if err != nil || p2 == p1 {
		t.Fatalf("after a crash: %v, same process %v", err, p2 == p1)
	}
	// Shutdown closes the process and refuses further use.
	s.shutdown()
	select {
	case <-p2.Done():
	default:
		t.Fatal("shutdown left the process running")
	}
	if _, err := s.acquire(ctx); !errors.Is(err, errHarnessClosed) {
		t.Fatalf("after shutdown: %v", err)
	}
	if f.calls != 3 {
		t.Fatalf("%d starts, want 3", f.calls)
	}
}
