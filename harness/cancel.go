package harness

import (
	"context"
	"sync"
)

// Cancellation is an attempt's cancellation state, the Go form of OpenClaw's
// createAgentHarnessAttemptCancellation:
//
//	open ──Cancel(reason)──▶ cancelled ──Freeze──▶ frozen
//	  │                                              ▲
//	  └───────────────────Freeze─────────────────────┘
//
// The first reason wins: whatever ends the cancellation first (an explicit
// Cancel, or the end of its parent) is the reason it keeps; later reasons
// change nothing. Freeze marks the terminal boundary: from then on Cancel
// returns false, the reason and the terminal outcome never change, and
// nothing is admitted.
//
// Admission is the run taking new work (queued input, injections, tool
// dispatch); the harness asks Admitting before each. A cancelled run admits
// nothing either: it is on its way to the terminal boundary.
type Cancellation struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool

	mu      sync.Mutex
	reason  error // a *teamster.Error once cancelled
	frozen  bool
	outcome error
}

// NewCancellation returns an open cancellation. When parent ends before the
// terminal boundary, its cause is taken as a Cancel reason. Context carries
// parent's values.
func NewCancellation(parent context.Context) *Cancellation {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	c := &Cancellation{ctx: ctx, cancel: cancel}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop = context.AfterFunc(parent, func() { c.Cancel(context.Cause(parent)) })
	return c
}

// Cancel records reason and ends Context with it, and reports whether this
// call did so. It returns false, and changes nothing, when a reason was
// recorded before or the cancellation is frozen. The reason is kept as a
// *teamster.Error: one given (cancelled, drain_timeout, lease_lost,
// deadline_exceeded, ...) as it is, a context deadline as
// deadline_exceeded, nil or any other error as cancelled.
func (c *Cancellation) Cancel(reason error) bool {
	r := asReason(reason)
	c.mu.Lock()
	if c.frozen || c.reason != nil {
		c.mu.Unlock()
		return false
	}
	c.reason = r
	c.mu.Unlock()
	c.cancel(r)
	return true
}

// Reason returns the recorded reason, a *teamster.Error, or nil when the
// attempt was not cancelled before its terminal boundary.
func (c *Cancellation) Reason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// Context ends when the attempt is cancelled; its cause is the reason.
func (c *Cancellation) Context() context.Context { return c.ctx }

// Admitting reports whether the run may still take new work: neither
// cancelled nor frozen.
func (c *Cancellation) Admitting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.frozen && c.reason == nil
}

// Freeze marks the terminal boundary of the attempt and returns its terminal
// outcome: nil when outcome is nil (the turn completed, even if a cancel
// arrived too late to stop it), else the recorded reason when there is one
// (the cause, not what the harness turned it into), else outcome. Only the
// first call freezes; later calls return the same outcome and ignore theirs.
func (c *Cancellation) Freeze(outcome error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen {
		return c.outcome
	}
	c.frozen = true
	// The parent's end no longer counts; its hook, should it be running,
	// finds the cancellation frozen.
	c.stop()
	switch {
	case outcome == nil:
		c.outcome = nil
	case c.reason != nil:
		c.outcome = c.reason
	default:
		c.outcome = outcome
	}
	return c.outcome
}

// Frozen reports whether Freeze was called.
func (c *Cancellation) Frozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

// Outcome returns the terminal outcome Freeze settled, nil before Freeze.
func (c *Cancellation) Outcome() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outcome
}
