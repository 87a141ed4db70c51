// Package injection is active-run injection (docs/PROTOCOL.md, "Injection"): the
// authority kinds, the V1 and V2 handle types a harness's active run
// implements, and the host-owned assertion that V2 handles call immediately
// before they mutate their queue or dispatch. It also holds what a harness
// needs to keep that contract: a Latch (an assertion that never recovers), a
// Settler (one settlement per input, never ahead of its admission) and a
// Batch (debounced writes that re-check every item before every attempt).
package injection

import (
	"encoding/json"
	"sync"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Kind is the authority an injection carries.
type Kind string

// Authority kinds.
const (
	// KindRun is ordinary input, bound to the backing run only.
	KindRun Kind = "run"
	// KindSourceBound is input whose source's lifetime also constrains
	// dispatch: it may be dispatched only while the source is still
	// authorised. It must never be relabelled as ordinary input.
	KindSourceBound Kind = "source-bound"
)

// Refusal is the error that refuses input of this kind once its assertion
// is false: no_active_run for run input, source_revoked for source-bound
// input. For any other kind it returns instead the invalid_request error to
// answer at once. who (the backend's name) prefixes the messages.
func (k Kind) Refusal(who string) (refused *teamster.Error, invalid error) {
	switch k {
	case KindRun:
		return teamster.Errorf(teamster.CodeNoActiveRun, "%s: the run no longer accepts this input", who), nil
	case KindSourceBound:
		return teamster.Errorf(teamster.CodeSourceRevoked, "%s: the input's source is no longer authorised", who), nil
	}
	return nil, teamster.Errorf(teamster.CodeInvalidRequest, "%s: authority kind %.40q is not run or source-bound", who, string(k))
}

// Settlement is how a queued input ended.
type Settlement string

// Settlements (reported once per item as an injection event, whose state is
// the settlement's EventState: the wire states of bus).
const (
	Committed Settlement = bus.InjectionCommitted
	Cancelled Settlement = bus.InjectionCancelled
	Rejected  Settlement = bus.InjectionRejected
	// Unconfirmed ends an input whose write was sent but whose outcome is
	// unknown (the connection dropped after the write, say): it may have
	// reached the run and is never written again. It is final like the
	// others. Its injection event keeps the state "accepted" (admitted, not
	// known to be committed): "committed" would claim a delivery nobody saw,
	// and "cancelled" or "rejected" would tell the sender it was not
	// delivered, inviting a duplicate.
	Unconfirmed Settlement = "unconfirmed"
)

// EventState is the state of the settlement's injection event: the
// settlement itself, except Unconfirmed, whose event keeps the state
// "accepted".
func (s Settlement) EventState() string {
	if s == Unconfirmed {
		return bus.InjectionAccepted
	}
	return string(s)
}

// QueueOptions travel with one queued input.
type QueueOptions struct {
	// Images attached to the input.
	Images []json.RawMessage
	// DebounceMs lets a batching backend wait for more input before writing.
	DebounceMs int64
	// OnQueueAccepted reports admission only (true when the handle queued it).
	OnQueueAccepted func(accepted bool)
	// OnQueueSettled is called exactly once, when the input is committed,
	// cancelled, rejected or left unconfirmed. A Settler keeps this promise.
	OnQueueSettled func(s Settlement)
}

// AssertFunc is the host-owned assertion of one injection: true while the
// input may still be dispatched. Handles call it after their own awaited
// preparation and immediately before queue mutation or dispatch, and again
// before every retry.
type AssertFunc func() bool

// V1 is an active-run handle that accepts ordinary input only.
type V1 interface {
	QueueMessage(text string, opts QueueOptions) error
}

// V2 is an active-run handle that enforces the host's assertion for each input
// and so may receive source-bound input.
type V2 interface {
	QueueMessage(text string, opts QueueOptions, assertCurrent AssertFunc, kind Kind) error
}

// Latch wraps a check so that once it has returned false (or the latch was
// revoked) it returns false forever, whatever the check says later. The check
// runs under the latch's lock, so calls are serialised: a call that starts
// after another has returned false returns false.
type Latch struct {
	mu      sync.Mutex
	check   func() bool
	revoked bool
}

// NewLatch returns a latch over check.
func NewLatch(check func() bool) *Latch { return &Latch{check: check} }

// Current runs the check unless the latch has already fallen.
func (l *Latch) Current() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.revoked {
		return false
	}
	if !l.check() {
		l.revoked = true
		return false
	}
	return true
}

// Assert returns the latch as an assertion.
func (l *Latch) Assert() AssertFunc { return l.Current }

// Revoke makes the latch false forever.
func (l *Latch) Revoke() {
	l.mu.Lock()
	l.revoked = true
	l.mu.Unlock()
}
