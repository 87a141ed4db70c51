package harness

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/teamster-fleet/teamster"
)

// DeadlinePhase names which of a DeadlineController's two deadlines passed.
type DeadlinePhase string

// The deadlines of an attempt.
const (
	// DeadlineExecution is StartedAt + Timeout: the attempt's timeoutMs.
	DeadlineExecution DeadlinePhase = "execution"
	// DeadlineSettlement is receivedAt + SettlementTimeout, armed by the
	// first BeginSettlement: the attempt's settlementTimeoutMs.
	DeadlineSettlement DeadlinePhase = "settlement"
)

// DeadlineOptions configure a DeadlineController.
type DeadlineOptions struct {
	// Parent, when set, aborts the controller when it ends (Abort with its
	// cause). Its values are visible through Context.
	Parent context.Context
	// StartedAt is when the attempt started, read from Clock. Read it with
	// Clock.Now (time.Now for the real clock): such a time carries a
	// monotonic reading, so a step of the wall clock does not move the
	// deadline. A zero StartedAt means now.
	StartedAt time.Time
	// Timeout is the execution budget from StartedAt (timeoutMs). Zero or
	// negative: no execution deadline.
	Timeout time.Duration
	// SettlementTimeout is the settlement budget from the time
	// BeginSettlement is given (settlementTimeoutMs). Zero is a valid budget:
	// the settlement deadline then passes as soon as it is armed.
	SettlementTimeout time.Duration
	// Clock is the clock deadlines are measured on; nil is the real clock.
	Clock clockwork.Clock
	// OnTimeout, when set, is called once for each deadline that passes while
	// the controller is open, on a goroutine of its own, after the contexts
	// the deadline ends are done. It may call Abort or Dispose.
	OnTimeout func(phase DeadlinePhase, err *teamster.Error)
}

// DeadlineController holds an attempt's two deadlines, the Go form of
// OpenClaw's createAgentHarnessAttemptDeadlineController:
//
//	        NewDeadlineController
//	                 │
//	     ┌───────────┴────────────────┐
//	     ▼                            ▼
//	execution deadline           BeginSettlement(receivedAt)  (first call only)
//	StartedAt + Timeout               │
//	ends Context()                    ▼
//	(deadline_exceeded)          settlement deadline
//	                             receivedAt + SettlementTimeout
//	                             ends SettlementContext() and Context()
//	                             (deadline_exceeded)
//
// Abort(reason), the end of Parent, or Dispose close the controller: both
// timers stop, both contexts end with the reason, and no OnTimeout follows.
//
// The execution deadline does not close the controller: a harness whose
// execution context ended may still arm the settlement deadline to bound its
// native interruption and cleanup. The settlement deadline is absolute and
// armed once; later BeginSettlement calls never extend it. Native
// interruption, completion decisions and cleanup stay with the harness.
//
// A controller owns no goroutine: its timers and the Parent hook run only when
// they fire. Dispose releases them; call it when the attempt ends.
type DeadlineController struct {
	clock        clockwork.Clock
	onTimeout    func(DeadlinePhase, *teamster.Error)
	timeout      time.Duration
	settleBudget time.Duration
	deadline     time.Time // zero without an execution deadline
	parent       context.Context

	ctx          context.Context
	cancel       context.CancelCauseFunc
	settleCtx    context.Context
	settleCancel context.CancelCauseFunc
	stopParent   func() bool

	mu             sync.Mutex
	closed         bool
	execFired      bool
	settleFired    bool
	armed          bool
	settleDeadline time.Time
	execTimer      clockwork.Timer
	settleTimer    clockwork.Timer
}

// NewDeadlineController starts the execution deadline of an attempt.
func NewDeadlineController(o DeadlineOptions) *DeadlineController {
	clock := o.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	parent := o.Parent
	if parent == nil {
		parent = context.Background()
	}
	start := o.StartedAt
	if start.IsZero() {
		start = clock.Now()
	}
	settle := o.SettlementTimeout
	if settle < 0 {
		settle = 0
	}
	c := &DeadlineController{clock: clock, onTimeout: o.OnTimeout, timeout: o.Timeout, settleBudget: settle, parent: parent}
	if o.Timeout > 0 {
		c.deadline = start.Add(o.Timeout)
	}
	// Both contexts keep Parent's values but not its cancellation: the end of
	// Parent reaches them through Abort, so their cause is always a
	// *teamster.Error.
	base := context.WithoutCancel(parent)
	ctx, cancel := context.WithCancelCause(base)
	c.ctx, c.cancel = deadlineCtx{Context: ctx, c: c}, cancel
	c.settleCtx, c.settleCancel = context.WithCancelCause(base)

	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() {
		// Until measures on the monotonic reading when both times carry one.
		c.execTimer = clock.AfterFunc(clock.Until(c.deadline), c.fireExecution)
	}
	c.stopParent = context.AfterFunc(parent, func() { c.Abort(context.Cause(parent)) })
	return c
}

// Context ends at the execution deadline with a deadline_exceeded cause, at
// the settlement deadline with its cause, or when the controller closes with
// the close reason. Its cause is always a *teamster.Error. Its Deadline is
// the execution deadline (or Parent's, when earlier).
func (c *DeadlineController) Context() context.Context { return c.ctx }

// Deadline returns the execution deadline, and false when there is none.
func (c *DeadlineController) Deadline() (time.Time, bool) {
	return c.deadline, !c.deadline.IsZero()
}

// BeginSettlement arms the settlement deadline at receivedAt +
// SettlementTimeout (a zero receivedAt means now) and returns it with true.
// Only the first call arms it: every later call, and any call after the
// controller closed, changes nothing and returns the deadline armed before
// (zero when none) with false.
func (c *DeadlineController) BeginSettlement(receivedAt time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.armed {
		return c.settleDeadline, false
	}
	if receivedAt.IsZero() {
		receivedAt = c.clock.Now()
	}
	c.armed = true
	c.settleDeadline = receivedAt.Add(c.settleBudget)
	c.settleTimer = c.clock.AfterFunc(c.clock.Until(c.settleDeadline), c.fireSettlement)
	return c.settleDeadline, true
}

// SettlementDeadline returns the armed settlement deadline, and false before
// the first BeginSettlement.
func (c *DeadlineController) SettlementDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settleDeadline, c.armed
}

// SettlementContext ends at the settlement deadline with a deadline_exceeded
// cause, or when the controller closes with the close reason. It does not end
// at the execution deadline.
func (c *DeadlineController) SettlementContext() context.Context { return c.settleCtx }

// SettlementDone is closed when SettlementContext ends.
func (c *DeadlineController) SettlementDone() <-chan struct{} { return c.settleCtx.Done() }

// Abort closes the controller with reason (nil is cancelled): both timers
// stop, Context and SettlementContext end with reason unless they already
// ended, and OnTimeout is not called for any deadline that passes later. Only
// the first Abort or Dispose counts; it reports whether this call closed the
// controller.
func (c *DeadlineController) Abort(reason error) bool {
	return c.close(asReason(reason))
}

// Dispose closes the controller (see Abort) with a cancelled reason and
// releases its timers and its hook on Parent. Call it when the attempt ends;
// calling it again does nothing. An OnTimeout call already under way when
// Dispose runs may finish after it returns.
func (c *DeadlineController) Dispose() {
	c.close(teamster.Errorf(teamster.CodeCancelled, "the attempt's deadlines were disposed"))
}

func (c *DeadlineController) close(reason *teamster.Error) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.closed = true
	if c.execTimer != nil {
		c.execTimer.Stop()
	}
	if c.settleTimer != nil {
		c.settleTimer.Stop()
	}
	stop := c.stopParent
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.cancel(reason)
	c.settleCancel(reason)
	return true
}

// fireExecution runs when the execution deadline passes.
func (c *DeadlineController) fireExecution() {
	c.mu.Lock()
	if c.closed || c.execFired || c.settleFired {
		c.mu.Unlock()
		return
	}
	c.execFired = true
	c.mu.Unlock()
	err := teamster.Errorf(teamster.CodeDeadlineExceeded, "the attempt ran past its timeout of %s", c.timeout)
	c.cancel(err)
	if c.onTimeout != nil {
		c.onTimeout(DeadlineExecution, err)
	}
}

// fireSettlement runs when the settlement deadline passes: the attempt is
// over its settlement budget, so its execution context ends as well.
func (c *DeadlineController) fireSettlement() {
	c.mu.Lock()
	if c.closed || c.settleFired {
		c.mu.Unlock()
		return
	}
	c.settleFired = true
	if c.execTimer != nil {
		c.execTimer.Stop()
	}
	c.mu.Unlock()
	err := teamster.Errorf(teamster.CodeDeadlineExceeded, "the attempt did not settle within its settlement budget of %s", c.settleBudget)
	c.settleCancel(err)
	c.cancel(err)
	if c.onTimeout != nil {
		c.onTimeout(DeadlineSettlement, err)
	}
}

// deadlineCtx reports the execution deadline as the context's Deadline. Its
// Done channel is the embedded context's, so children derived from it are
// cancelled without a goroutine.
type deadlineCtx struct {
	context.Context
	c *DeadlineController
}

func (d deadlineCtx) Deadline() (time.Time, bool) {
	pd, pok := d.c.parent.Deadline()
	own, ok := d.c.Deadline()
	switch {
	case pok && (!ok || pd.Before(own)):
		return pd, true
	default:
		return own, ok
	}
}

// asReason turns a cancellation reason into the *teamster.Error it is
// reported as: a *teamster.Error (or an error wrapping one) as it is, a
// context deadline as deadline_exceeded, nil and anything else as cancelled.
func asReason(err error) *teamster.Error {
	var te *teamster.Error
	switch {
	case err == nil:
		return teamster.Errorf(teamster.CodeCancelled, "the attempt was cancelled")
	case errors.As(err, &te) && te != nil:
		return te
	case errors.Is(err, context.DeadlineExceeded):
		return teamster.Errorf(teamster.CodeDeadlineExceeded, "the attempt's deadline passed")
	case errors.Is(err, context.Canceled):
		return teamster.Errorf(teamster.CodeCancelled, "the attempt was cancelled")
	default:
		return teamster.Errorf(teamster.CodeCancelled, "%v", err)
	}
}
