package injection

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jonboulle/clockwork"

	"github.com/teamster-fleet/teamster"
)

// ErrOutcomeUnknown is what a WriteFunc returns (or wraps) when its write may
// have reached the backend but it cannot tell: the connection dropped after
// the write was sent, say. The write's items are settled Unconfirmed and
// never written again.
var ErrOutcomeUnknown = errors.New("injection: write outcome unknown")

// Item is one input as a WriteFunc sees it.
type Item struct {
	Text   string
	Images []json.RawMessage
	Kind   Kind
}

// WriteFunc makes one physical write of items, in order. It returns nil when
// the backend took them all; ErrOutcomeUnknown when they may or may not have
// reached it; an error wrapped with backoff.Permanent when it refused them
// for good; any other error when nothing was written and a retry may work.
// It returns promptly once ctx is done.
type WriteFunc func(ctx context.Context, items []Item) error

// BatchOptions configure a Batch.
type BatchOptions struct {
	// Debounce is how long the first waiting input waits for more before
	// the batch is written. An input's own QueueOptions.DebounceMs, when
	// positive, replaces it for that input; the batch is written when the
	// earliest input's wait ends. Zero writes at once.
	Debounce time.Duration
	// MaxItems caps the items of one write; once that many wait, they are
	// written at once. Zero means no cap.
	MaxItems int
	// Retry returns a fresh policy for one write and its retries. Nil means
	// exponential from 100 ms to 2 s, giving up after 30 s.
	Retry func() backoff.BackOff
	// Clock times debounce and retry waits. Nil means the real clock.
	Clock clockwork.Clock
}

// Batch is the queue of a backend that writes several inputs at once. Add
// admits an input as a V2 handle would (its handle's QueueMessage may simply
// call Add); a background loop writes what waits once the debounce ends.
//
// Each item keeps its assertion, called again immediately before every write
// that carries it, retries included. An item whose assertion has fallen is
// settled Rejected and left out; the others are written. After a write the
// items are settled by its outcome: nil Committed, ErrOutcomeUnknown
// Unconfirmed (never written again), a permanent error Rejected, retries
// exhausted Rejected, the batch's context ended Cancelled. Writes happen one
// at a time, in the order the items were added.
//
// Lifecycle:
//
//	open ──Close──▶ closing ──write in flight done, or Close's ctx ends──▶ closed
//
// Open: Add admits, the loop writes. Closing: Add refuses with no_active_run,
// nothing new is written, a write in flight (with its retries) may finish
// until Close's ctx ends, when it is cancelled. Closed: whatever still waits
// is settled Cancelled. Close does not write what waits: call Flush first to
// deliver it.
type Batch struct {
	write WriteFunc
	o     BatchOptions

	ctx    context.Context // lifetime of writes; cancelled when Close stops waiting
	cancel context.CancelFunc

	flushes chan chan struct{} // Flush requests; closed reply when written
	stop    chan struct{}      // closed by the first Close
	done    chan struct{}      // closed when the loop has returned

	mu      sync.Mutex
	pending []*entry  // admitted, not yet taken by a write
	due     time.Time // when the earliest pending item's debounce ends
	timer   clockwork.Timer
	armed   time.Time // when timer fires; zero while stopped or fired
	closed  bool
}

// entry is one admitted item.
type entry struct {
	item   Item
	assert AssertFunc
	s      *Settler
	due    time.Time // when its debounce ends
}

// NewBatch starts a batch that writes with write. Close must be called to
// stop its loop.
func NewBatch(write WriteFunc, o BatchOptions) *Batch {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Retry == nil {
		clock := o.Clock
		o.Retry = func() backoff.BackOff {
			return backoff.NewExponentialBackOff(
				backoff.WithInitialInterval(100*time.Millisecond),
				backoff.WithMaxInterval(2*time.Second),
				backoff.WithMaxElapsedTime(30*time.Second),
				backoff.WithClockProvider(clock),
			)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Batch{
		write:   write,
		o:       o,
		ctx:     ctx,
		cancel:  cancel,
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		timer:   o.Clock.NewTimer(time.Hour),
	}
	b.timer.Stop()
	go b.run()
	return b
}

// Add admits text. The authority kind must be run or source-bound; a missing
// assertion counts as false. The assertion is called after the cheap checks
// and immediately before the queue is mutated; when it is false the input is
// settled Rejected and refused with source_revoked (source-bound input) or
// no_active_run (run input). After Close, input is settled Rejected and
// refused with no_active_run. Admitted input gets OnQueueAccepted(true) and,
// later, exactly one settlement.
func (b *Batch) Add(text string, opts QueueOptions, assertCurrent AssertFunc, kind Kind) error {
	refused, invalid := kind.Refusal("injection")
	if invalid != nil {
		Refuse(opts)
		return invalid
	}
	if b.isClosed() {
		Refuse(opts)
		return errClosed()
	}
	if assertCurrent == nil || !assertCurrent() {
		Refuse(opts)
		return refused
	}
	e := &entry{item: Item{Text: text, Images: opts.Images, Kind: kind}, assert: assertCurrent, s: NewSettler(opts)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		Refuse(opts)
		return errClosed()
	}
	e.due = b.o.Clock.Now().Add(b.debounce(opts))
	b.pending = append(b.pending, e)
	if b.due.IsZero() || e.due.Before(b.due) {
		b.due = e.due
	}
	b.arm()
	b.mu.Unlock()
	e.s.Accept()
	return nil
}

// Flush writes everything waiting now, without waiting for the debounce, and
// returns once those writes are done (the items' outcomes go to their
// settlements). It returns ctx's error if ctx ends first (the writes go on)
// and no_active_run once the batch is closed.
func (b *Batch) Flush(ctx context.Context) error {
	if b.isClosed() {
		return errClosed()
	}
	reply := make(chan struct{})
	select {
	case b.flushes <- reply:
	case <-b.done:
		return errClosed()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close refuses further input, lets a write in flight finish until ctx ends
// (then cancels it and returns ctx's error without waiting for it; that
// write still settles its own items), and settles everything still waiting
// as Cancelled. It may be called more than once.
func (b *Batch) Close(ctx context.Context) error {
	b.mu.Lock()
	first := !b.closed
	b.closed = true
	b.arm()
	b.mu.Unlock()
	if first {
		close(b.stop)
	}
	var err error
	select {
	case <-b.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	b.cancel()
	b.mu.Lock()
	left := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, e := range left {
		e.s.Settle(Cancelled)
	}
	return err
}

// run is the batch's loop: it writes what waits when the timer says it is
// due (the earliest debounce ended, or MaxItems wait) or on Flush, and
// returns on Close. Add and take set the timer under mu, so a write is due
// from the moment Add returns.
func (b *Batch) run() {
	defer close(b.done)
	defer b.timer.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-b.timer.Chan():
			b.mu.Lock()
			b.armed = time.Time{}
			b.mu.Unlock()
			b.drain(false)
		case reply := <-b.flushes:
			b.drain(true)
			close(reply)
		}
		b.mu.Lock()
		b.arm()
		b.mu.Unlock()
	}
}

// arm sets the timer for the next write: stopped when nothing waits, at
// once when MaxItems wait, else when the earliest debounce ends. A timer
// already set no later is left alone. b.mu is held.
func (b *Batch) arm() {
	if b.closed || len(b.pending) == 0 {
		if !b.armed.IsZero() {
			b.timer.Stop()
			b.armed = time.Time{}
		}
		return
	}
	at := b.due
	if b.o.MaxItems > 0 && len(b.pending) >= b.o.MaxItems {
		at = b.o.Clock.Now()
	}
	if !b.armed.IsZero() && !at.Before(b.armed) {
		return
	}
	b.armed = at
	b.timer.Reset(b.o.Clock.Until(at))
}

// next reports whether items wait and how long until they are due (zero
// once MaxItems wait).
func (b *Batch) next() (wait time.Duration, waiting bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.pending) == 0 {
		return 0, false
	}
	if b.o.MaxItems > 0 && len(b.pending) >= b.o.MaxItems {
		return 0, true
	}
	return b.o.Clock.Until(b.due), true
}

// drain writes what is due (everything waiting, when all), MaxItems at a
// time, until nothing is due, the batch closes or its context ends.
func (b *Batch) drain(all bool) {
	for b.ctx.Err() == nil {
		if wait, waiting := b.next(); !waiting || (wait > 0 && !all) {
			return
		}
		batch := b.take()
		if len(batch) == 0 {
			return
		}
		b.send(batch)
	}
}

// take removes the next write's items from the queue.
func (b *Batch) take() []*entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	n := len(b.pending)
	if b.o.MaxItems > 0 {
		n = min(n, b.o.MaxItems)
	}
	batch := slices.Clone(b.pending[:n])
	b.pending = slices.Clone(b.pending[n:])
	b.due = time.Time{}
	for _, e := range b.pending {
		if b.due.IsZero() || e.due.Before(b.due) {
			b.due = e.due
		}
	}
	b.arm()
	return batch
}

// send writes batch, retrying under the retry policy, and settles every item
// exactly once. Before every attempt each item's assertion is called again and
// the items whose assertion fell are settled Rejected and left out.
func (b *Batch) send(batch []*entry) {
	policy := b.o.Retry()
	policy.Reset()
	for {
		if b.ctx.Err() != nil {
			settleAll(batch, Cancelled)
			return
		}
		batch = current(batch)
		if len(batch) == 0 {
			return
		}
		err := b.write(b.ctx, items(batch))
		var permanent *backoff.PermanentError
		switch {
		case err == nil:
			settleAll(batch, Committed)
			return
		case errors.Is(err, ErrOutcomeUnknown):
			settleAll(batch, Unconfirmed)
			return
		case errors.As(err, &permanent):
			settleAll(batch, Rejected)
			return
		case b.ctx.Err() != nil:
			settleAll(batch, Cancelled)
			return
		}
		wait := policy.NextBackOff()
		if wait == backoff.Stop {
			settleAll(batch, Rejected)
			return
		}
		if !b.sleep(wait) {
			settleAll(batch, Cancelled)
			return
		}
	}
}

// sleep waits d on the batch's clock; false when the batch's context ended.
func (b *Batch) sleep(d time.Duration) bool {
	if d <= 0 {
		return b.ctx.Err() == nil
	}
	t := b.o.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-b.ctx.Done():
		return false
	}
}

// debounce is how long an input with opts may wait for more.
func (b *Batch) debounce(opts QueueOptions) time.Duration {
	if opts.DebounceMs <= 0 {
		return b.o.Debounce
	}
	if opts.DebounceMs > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(opts.DebounceMs) * time.Millisecond
}

func (b *Batch) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// current keeps the items whose assertion still holds and settles the others
// Rejected.
func current(batch []*entry) []*entry {
	kept := batch[:0]
	for _, e := range batch {
		if e.assert() {
			kept = append(kept, e)
		} else {
			e.s.Settle(Rejected)
		}
	}
	clear(batch[len(kept):])
	return kept
}

func items(batch []*entry) []Item {
	out := make([]Item, len(batch))
	for i, e := range batch {
		out[i] = e.item
	}
	return out
}

func settleAll(batch []*entry, s Settlement) {
	for _, e := range batch {
		e.s.Settle(s)
	}
}

func errClosed() *teamster.Error {
	return teamster.Errorf(teamster.CodeNoActiveRun, "injection: the batch is closed")
}
