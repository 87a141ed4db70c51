package harness_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// timeouts records OnTimeout calls.
type timeouts chan harness.DeadlinePhase

func newTimeouts() timeouts { return make(timeouts, 8) }

func (r timeouts) on(phase harness.DeadlinePhase, err *teamster.Error) {
	if err == nil || err.Code != teamster.CodeDeadlineExceeded {
		panic(fmt.Sprintf("OnTimeout(%s) with %v", phase, err))
	}
	r <- phase
}

// next waits for the next OnTimeout call.
func (r timeouts) next(t *testing.T) harness.DeadlinePhase {
	t.Helper()
	select {
	case p := <-r:
		return p
	case <-time.After(waitBound):
		t.Fatal("OnTimeout was not called")
		return ""
	}
}

// none fails the test if OnTimeout was called and not yet consumed.
func (r timeouts) none(t *testing.T) {
	t.Helper()
	select {
	case p := <-r:
		t.Fatalf("unexpected OnTimeout(%s)", p)
	default:
	}
}

func TestExecutionDeadlineFiresAtTimeout(t *testing.T) {
	cases := []struct {
		name    string
		started time.Duration // StartedAt relative to the clock's now
		timeout time.Duration
		notYet  time.Duration // advance that must not fire; then 1ns fires
	}{
		{"started now", 0, 10 * time.Second, 10*time.Second - time.Nanosecond},
		{"started earlier", -4 * time.Second, 10 * time.Second, 6*time.Second - time.Nanosecond},
		{"one nanosecond budget", 0, time.Nanosecond, 0},
		{"already past", -20 * time.Second, 10 * time.Second, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc := clockwork.NewFakeClockAt(t0)
			rec := newTimeouts()
			started := fc.Now().Add(tc.started)
			c := harness.NewDeadlineController(harness.DeadlineOptions{
				StartedAt: started, Timeout: tc.timeout, SettlementTimeout: time.Second,
				Clock: fc, OnTimeout: rec.on,
			})
			defer c.Dispose()
			ctx := c.Context()
			if d, ok := c.Deadline(); !ok || !d.Equal(started.Add(tc.timeout)) {
				t.Fatalf("Deadline() = %v, %v; want %v", d, ok, started.Add(tc.timeout))
			}
			if d, ok := ctx.Deadline(); !ok || !d.Equal(started.Add(tc.timeout)) {
				t.Fatalf("Context().Deadline() = %v, %v; want %v", d, ok, started.Add(tc.timeout))
			}
			if tc.notYet >= 0 {
				fc.Advance(tc.notYet)
				if ctx.Err() != nil {
					t.Fatalf("context ended %s before the deadline", tc.timeout-tc.notYet+tc.started)
				}
				rec.none(t)
				fc.Advance(time.Nanosecond)
			}
			waitClosed(t, ctx.Done(), "execution context")
			wantCode(t, "cause", context.Cause(ctx), teamster.CodeDeadlineExceeded)
			if got := rec.next(t); got != harness.DeadlineExecution {
				t.Fatalf("OnTimeout(%s), want execution", got)
			}
			if isClosed(c.SettlementDone()) {
				t.Fatal("the execution deadline closed the settlement")
			}
		})
	}
}

func TestNoExecutionDeadlineWithoutTimeout(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	rec := newTimeouts()
	c := harness.NewDeadlineController(harness.DeadlineOptions{Clock: fc, OnTimeout: rec.on})
	defer c.Dispose()
	if _, ok := c.Deadline(); ok {
		t.Fatal("Deadline() reported a deadline without a timeout")
	}
	if _, ok := c.Context().Deadline(); ok {
		t.Fatal("Context().Deadline() reported a deadline without a timeout")
	}
	fc.Advance(1000 * time.Hour)
	if c.Context().Err() != nil {
		t.Fatal("context ended without a timeout")
	}
	rec.none(t)
}

func TestSettlementArmedOnce(t *testing.T) {
	const budget = 5 * time.Second
	cases := []struct {
		name   string
		first  time.Duration // receivedAt of the first call, relative to now
		wait   time.Duration // advance before the second call
		second time.Duration // receivedAt of the second call, relative to now
	}{
		{"second call later", 0, 2 * time.Second, 0},
		{"second call far later", 0, 4 * time.Second, time.Hour},
		{"second call earlier", 0, 2 * time.Second, -time.Hour},
		{"first received in the past", -3 * time.Second, time.Second, 0},
		{"second call at once", 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc := clockwork.NewFakeClockAt(t0)
			rec := newTimeouts()
			c := harness.NewDeadlineController(harness.DeadlineOptions{
				StartedAt: fc.Now(), Timeout: time.Hour, SettlementTimeout: budget, Clock: fc, OnTimeout: rec.on,
			})
			defer c.Dispose()
			if _, ok := c.SettlementDeadline(); ok {
				t.Fatal("SettlementDeadline reported before BeginSettlement")
			}
			want := fc.Now().Add(tc.first).Add(budget)
			d1, ok := c.BeginSettlement(fc.Now().Add(tc.first))
			if !ok || !d1.Equal(want) {
				t.Fatalf("first BeginSettlement = %v, %v; want %v, true", d1, ok, want)
			}
			fc.Advance(tc.wait)
			d2, ok := c.BeginSettlement(fc.Now().Add(tc.second))
			if ok || !d2.Equal(want) {
				t.Fatalf("second BeginSettlement = %v, %v; want %v, false", d2, ok, want)
			}
			if d, ok := c.SettlementDeadline(); !ok || !d.Equal(want) {
				t.Fatalf("SettlementDeadline() = %v, %v; want %v", d, ok, want)
			}
			fc.Advance(want.Sub(fc.Now()) - time.Nanosecond)
			if isClosed(c.SettlementDone()) || c.Context().Err() != nil {
				t.Fatal("settlement ended before its deadline")
			}
			rec.none(t)
			fc.Advance(time.Nanosecond)
			waitClosed(t, c.SettlementDone(), "settlement")
			wantCode(t, "settlement cause", context.Cause(c.SettlementContext()), teamster.CodeDeadlineExceeded)
			if got := rec.next(t); got != harness.DeadlineSettlement {
				t.Fatalf("OnTimeout(%s), want settlement", got)
			}
			// Past its settlement budget, the attempt's execution ends too.
			waitClosed(t, c.Context().Done(), "execution context")
			wantCode(t, "execution cause", context.Cause(c.Context()), teamster.CodeDeadlineExceeded)
		})
	}
}

func TestSettlementDefaultsAndZeroBudget(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	rec := newTimeouts()
	c := harness.NewDeadlineController(harness.DeadlineOptions{Timeout: time.Hour, SettlementTimeout: 0, Clock: fc, OnTimeout: rec.on})
	defer c.Dispose()
	// A zero receivedAt is now; a zero budget passes at once.
	d, ok := c.BeginSettlement(time.Time{})
	if !ok || !d.Equal(t0) {
		t.Fatalf("BeginSettlement = %v, %v; want %v, true", d, ok, t0)
	}
	waitClosed(t, c.SettlementDone(), "settlement with a zero budget")
	if got := rec.next(t); got != harness.DeadlineSettlement {
		t.Fatalf("OnTimeout(%s), want settlement", got)
	}
}

func TestConcurrentBeginSettlementArmsOnce(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	c := harness.NewDeadlineController(harness.DeadlineOptions{Timeout: time.Hour, SettlementTimeout: time.Minute, Clock: fc})
	defer c.Dispose()
	const n = 32
	var wg sync.WaitGroup
	deadlines := make([]time.Time, n)
	armed := make([]bool, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadlines[i], armed[i] = c.BeginSettlement(t0.Add(time.Duration(i) * time.Second))
		}()
	}
	wg.Wait()
	winners := 0
	want, _ := c.SettlementDeadline()
	for i := range n {
		if armed[i] {
			winners++
		}
		if !deadlines[i].Equal(want) {
			t.Errorf("call %d got deadline %v, want %v", i, deadlines[i], want)
		}
	}
	if winners != 1 {
		t.Fatalf("%d calls armed the settlement deadline, want 1", winners)
	}
}

func TestExecutionDeadlineThenSettlement(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	rec := newTimeouts()
	c := harness.NewDeadlineController(harness.DeadlineOptions{
		StartedAt: t0, Timeout: 10 * time.Second, SettlementTimeout: 3 * time.Second, Clock: fc, OnTimeout: rec.on,
	})
	defer c.Dispose()
	fc.Advance(10 * time.Second)
	waitClosed(t, c.Context().Done(), "execution context")
	if got := rec.next(t); got != harness.DeadlineExecution {
		t.Fatalf("OnTimeout(%s), want execution", got)
	}
	// The harness bounds its cleanup with the settlement deadline.
	if _, ok := c.BeginSettlement(fc.Now()); !ok {
		t.Fatal("BeginSettlement after the execution deadline did not arm")
	}
	fc.Advance(3 * time.Second)
	waitClosed(t, c.SettlementDone(), "settlement")
	if got := rec.next(t); got != harness.DeadlineSettlement {
		t.Fatalf("OnTimeout(%s), want settlement", got)
	}
	// The execution context keeps its first cause.
	if msg := teamster.AsError(context.Cause(c.Context())).Message; msg != "the attempt ran past its timeout of 10s" {
		t.Fatalf("execution cause %q", msg)
	}
}

func TestSettlementStopsExecutionDeadline(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	rec := newTimeouts()
	c := harness.NewDeadlineController(harness.DeadlineOptions{
		StartedAt: t0, Timeout: 10 * time.Second, SettlementTimeout: 5 * time.Second, Clock: fc, OnTimeout: rec.on,
	})
	defer c.Dispose()
	c.BeginSettlement(t0)
	fc.Advance(5 * time.Second)
	if got := rec.next(t); got != harness.DeadlineSettlement {
		t.Fatalf("OnTimeout(%s), want settlement", got)
	}
	fc.Advance(time.Hour)
	rec.none(t)
}

func TestDeadlineCloseEndsBoth(t *testing.T) {
	leaseLost := teamster.Errorf(teamster.CodeLeaseLost, "lease gone")
	drain := teamster.Errorf(teamster.CodeDrainTimeout, "drain over")
	cases := []struct {
		name  string
		close func(c *harness.DeadlineController, cancelParent context.CancelCauseFunc)
		code  teamster.Code
		want  error // the exact cause, when it is the reason given
	}{
		{"abort with a reason", func(c *harness.DeadlineController, _ context.CancelCauseFunc) { c.Abort(leaseLost) }, teamster.CodeLeaseLost, leaseLost},
		{"abort without a reason", func(c *harness.DeadlineController, _ context.CancelCauseFunc) { c.Abort(nil) }, teamster.CodeCancelled, nil},
		{"abort with a context error", func(c *harness.DeadlineController, _ context.CancelCauseFunc) { c.Abort(context.DeadlineExceeded) }, teamster.CodeDeadlineExceeded, nil},
		{"parent ends with a cause", func(_ *harness.DeadlineController, cancel context.CancelCauseFunc) { cancel(drain) }, teamster.CodeDrainTimeout, drain},
		{"parent ends plainly", func(_ *harness.DeadlineController, cancel context.CancelCauseFunc) { cancel(nil) }, teamster.CodeCancelled, nil},
		{"dispose", func(c *harness.DeadlineController, _ context.CancelCauseFunc) { c.Dispose() }, teamster.CodeCancelled, nil},
	}
	for _, tc := range cases {
		for _, armed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/settlement armed %v", tc.name, armed), func(t *testing.T) {
				fc := clockwork.NewFakeClockAt(t0)
				rec := newTimeouts()
				parent, cancelParent := context.WithCancelCause(context.Background())
				defer cancelParent(nil)
				c := harness.NewDeadlineController(harness.DeadlineOptions{
					Parent: parent, StartedAt: t0, Timeout: 10 * time.Second, SettlementTimeout: 5 * time.Second,
					Clock: fc, OnTimeout: rec.on,
				})
				defer c.Dispose()
				if armed {
					c.BeginSettlement(t0)
				}
				tc.close(c, cancelParent)
				waitClosed(t, c.Context().Done(), "execution context")
				waitClosed(t, c.SettlementDone(), "settlement")
				for _, ctx := range []context.Context{c.Context(), c.SettlementContext()} {
					cause := context.Cause(ctx)
					wantCode(t, "cause", cause, tc.code)
					if tc.want != nil && cause != tc.want {
						t.Fatalf("cause %v, want the reason given (%v)", cause, tc.want)
					}
				}
				// Closed: nothing more arms or fires.
				if _, ok := c.BeginSettlement(fc.Now()); ok {
					t.Fatal("BeginSettlement armed a closed controller")
				}
				if c.Abort(leaseLost) {
					t.Fatal("Abort of a closed controller reported closing it")
				}
				fc.Advance(time.Hour)
				rec.none(t)
				wantCode(t, "cause after close", context.Cause(c.Context()), tc.code)
			})
		}
	}
}

func TestDisposeAfterDeadlineKeepsCause(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	c := harness.NewDeadlineController(harness.DeadlineOptions{StartedAt: t0, Timeout: time.Second, Clock: fc})
	fc.Advance(time.Second)
	waitClosed(t, c.Context().Done(), "execution context")
	c.Dispose()
	c.Dispose()
	wantCode(t, "execution cause", context.Cause(c.Context()), teamster.CodeDeadlineExceeded)
	wantCode(t, "settlement cause", context.Cause(c.SettlementContext()), teamster.CodeCancelled)
}

func TestDeadlineParentAlreadyDone(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	cancel(teamster.Errorf(teamster.CodeLeaseLost, "gone before the start"))
	c := harness.NewDeadlineController(harness.DeadlineOptions{Parent: parent, Timeout: time.Hour, Clock: clockwork.NewFakeClockAt(t0)})
	defer c.Dispose()
	waitClosed(t, c.Context().Done(), "execution context")
	wantCode(t, "cause", context.Cause(c.Context()), teamster.CodeLeaseLost)
}

type ctxKey struct{}

func TestDeadlineContextCarriesParentValuesAndDeadline(t *testing.T) {
	now := time.Now()
	fc := clockwork.NewFakeClockAt(now)
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	parent, cancel := context.WithDeadline(parent, now.Add(time.Hour))
	defer cancel()
	c := harness.NewDeadlineController(harness.DeadlineOptions{Parent: parent, StartedAt: now, Timeout: 2 * time.Hour, Clock: fc})
	defer c.Dispose()
	if got := c.Context().Value(ctxKey{}); got != "v" {
		t.Fatalf("Value = %v, want the parent's", got)
	}
	if got := c.SettlementContext().Value(ctxKey{}); got != "v" {
		t.Fatalf("settlement Value = %v, want the parent's", got)
	}
	if d, _ := c.Context().Deadline(); !d.Equal(now.Add(time.Hour)) {
		t.Fatalf("Deadline %v, want the parent's earlier one", d)
	}
	// A child context ends with it, and sees its cause.
	child, cancelChild := context.WithCancel(c.Context())
	defer cancelChild()
	c.Abort(teamster.Errorf(teamster.CodeCancelled, "stop"))
	waitClosed(t, child.Done(), "child context")
	wantCode(t, "child cause", context.Cause(child), teamster.CodeCancelled)
}

func TestDeadlineRealClock(t *testing.T) {
	rec := newTimeouts()
	c := harness.NewDeadlineController(harness.DeadlineOptions{StartedAt: time.Now(), Timeout: time.Millisecond, OnTimeout: rec.on})
	defer c.Dispose()
	waitClosed(t, c.Context().Done(), "execution context on the real clock")
	wantCode(t, "cause", context.Cause(c.Context()), teamster.CodeDeadlineExceeded)
	if got := rec.next(t); got != harness.DeadlineExecution {
		t.Fatalf("OnTimeout(%s), want execution", got)
	}
}

func TestOnTimeoutMayDispose(t *testing.T) {
	fc := clockwork.NewFakeClockAt(t0)
	done := make(chan struct{})
	var c *harness.DeadlineController
	c = harness.NewDeadlineController(harness.DeadlineOptions{
		StartedAt: t0, Timeout: time.Second, Clock: fc,
		OnTimeout: func(harness.DeadlinePhase, *teamster.Error) { c.Dispose(); close(done) },
	})
	fc.Advance(time.Second)
	waitClosed(t, done, "OnTimeout")
	waitClosed(t, c.SettlementDone(), "settlement after Dispose in OnTimeout")
}

func TestDeadlineControllerLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	var cancels []context.CancelFunc
	for i := range 200 {
		fc := clockwork.NewFakeClockAt(t0)
		parent, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		rec := newTimeouts()
		c := harness.NewDeadlineController(harness.DeadlineOptions{
			Parent: parent, StartedAt: t0, Timeout: time.Second, SettlementTimeout: time.Second, Clock: fc, OnTimeout: rec.on,
		})
		switch i % 5 {
		case 0: // disposed untouched
		case 1: // disposed while settling
			c.BeginSettlement(t0)
		case 2: // the execution deadline fired
			fc.Advance(time.Second)
			rec.next(t)
		case 3: // the settlement deadline fired
			c.BeginSettlement(t0)
			fc.Advance(time.Second)
			rec.next(t)
		case 4: // aborted by its parent
			cancel()
			waitClosed(t, c.SettlementDone(), "settlement")
		}
		c.Dispose()
	}
	for _, cancel := range cancels {
		cancel()
	}
	// Timer callbacks that already ran may still be returning: give the
	// scheduler the chance to finish them, without sleeping.
	end := time.Now().Add(waitBound)
	for runtime.NumGoroutine() > before && time.Now().Before(end) {
		runtime.Gosched()
	}
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("%d goroutines before, %d after Dispose:\n%s", before, after, buf[:n])
	}
}

func TestDeadlineCauseIsAlwaysTeamsterError(t *testing.T) {
	// The end of a parent without a teamster cause still ends Context with a
	// *teamster.Error, which harnesses can return as it is.
	parent, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	c := harness.NewDeadlineController(harness.DeadlineOptions{Parent: parent, Clock: clockwork.NewFakeClockAt(t0)})
	defer c.Dispose()
	waitClosed(t, c.Context().Done(), "execution context")
	var te *teamster.Error
	if !errors.As(context.Cause(c.Context()), &te) {
		t.Fatalf("cause %T is not a *teamster.Error", context.Cause(c.Context()))
	}
	wantCode(t, "cause", te, teamster.CodeDeadlineExceeded)
}
