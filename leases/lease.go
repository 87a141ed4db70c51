package leases

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/teamster-fleet/teamster"
)

// errReleased says a lease ended because its holder finished or released it.
var errReleased = errors.New("lease released")

// Lease is one held session lease. It ends once: lost (renewals refused, or
// none succeeded for ttl - margin; Err is lease_lost and the keeper's OnLost
// is told) or released. Current says whether it is still held. Every write under it carries its fence.
//
// Its state is its own, shared by its holder, the keeper's renewal rounds and
// its self-fence timer (under mu and the atomics); the keeper's loop only
// holds the set of leases. Every time it reads is the keeper's clock.
type Lease struct {
	k         *Keeper
	keys      sessionKeys
	attemptID string
	fence     string
	// Key names built once: the renewal round uses them for every lease.
	leaseKey, attemptKey string

	lastOK  atomic.Int64 // clock UnixNano of the send time of the last successful renewal
	seqSent atomic.Int64 // highest event seq the holder has sent
	seqRes  atomic.Int64 // event seq reserved in Redis

	mu    sync.Mutex
	err   error // why the lease ended; nil while held
	done  chan struct{}
	timer clockwork.Timer
}

func (l *Lease) renewKeys() []string { return []string{l.leaseKey, l.attemptKey} }

func (l *Lease) indexMember() string { return indexMember(l.keys.tag, l.attemptID) }

// AttemptID is the attempt the lease was claimed for.
func (l *Lease) AttemptID() string { return l.attemptID }

// Fence is the lease's fencing token, <epoch>:<n>.
func (l *Lease) Fence() string { return l.fence }

// Err says why the lease ended: nil while it is held, a lease_lost
// *teamster.Error when it was lost, another error ("lease released") when its
// holder let it go.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Current reports, at the moment of the call, whether the lease is held: not
// ended, and renewed successfully within ttl - margin. It does not wait for
// the self-fence timer, so a holder that was paused past its TTL sees false on
// its first check after waking.
func (l *Lease) Current() bool {
	if l.Err() != nil {
		return false
	}
	last := time.Unix(0, l.lastOK.Load())
	return l.k.clock.Since(last) < l.k.ttl-l.k.margin
}

// end ends the lease with err, once; later calls change nothing and report
// false. Err and Current see it at once; the keeper's loop drops the lease
// next, and only then does done close, so whoever sees done closed also sees
// the keeper no longer hold it.
func (l *Lease) end(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.k.forget(l)
	close(l.done)
	return true
}

// lose ends the lease as lost and tells the keeper's OnLost.
func (l *Lease) lose(format string, args ...any) {
	err := teamster.Errorf(teamster.CodeLeaseLost, format, args...)
	if l.end(err) {
		l.k.lost(l, err)
	}
}

// renewed records a successful renewal sent at sentAt and re-arms the
// self-fence timer.
func (l *Lease) renewed(sentAt time.Time, reserved int64) {
	if reserved > l.seqRes.Load() {
		l.seqRes.Store(reserved)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if sentAt.UnixNano() > l.lastOK.Load() {
		l.lastOK.Store(sentAt.UnixNano())
	}
	d := l.k.ttl - l.k.margin - l.k.clock.Since(time.Unix(0, l.lastOK.Load()))
	l.timer.Reset(max(d, 0))
}

// selfFence fires when no renewal succeeded for ttl - margin.
func (l *Lease) selfFence() {
	last := time.Unix(0, l.lastOK.Load())
	if since := l.k.clock.Since(last); since >= l.k.ttl-l.k.margin {
		l.lose("no successful renewal for %s (ttl %s, margin %s): self-fenced", since.Round(time.Millisecond), l.k.ttl, l.k.margin)
	}
}

// NoteSeq records that the holder is about to send event seq n, and makes sure
// n is inside the seq range reserved in Redis, extending the reservation
// (one fenced round trip) when it is not. The reaper's result for this attempt
// continues after the reservation, so it never repeats a seq sent here.
func (l *Lease) NoteSeq(ctx context.Context, n int64) error {
	for {
		cur := l.seqSent.Load()
		if n <= cur || l.seqSent.CompareAndSwap(cur, n) {
			break
		}
	}
	if n <= l.seqRes.Load() {
		return nil
	}
	want := n + SeqReservation
	sentAt := l.k.clock.Now()
	ok, err := renewScript.Run(ctx, l.k.store.rdb, []string{l.keys.lease(), l.keys.attempt(l.attemptID)},
		l.fence, l.k.ttl.Milliseconds(), want, l.k.holder, l.attemptID).Int()
	if err != nil {
		return fmt.Errorf("reserve event seq: %w", err)
	}
	if ok != 1 {
		l.lose("lease refused while reserving event seq")
		return l.Err()
	}
	l.renewed(sentAt, want)
	return nil
}

// Reserved reports whether event seq n is inside the range reserved in
// Redis, so that NoteSeq(n) makes no round trip.
func (l *Lease) Reserved(n int64) bool { return n <= l.seqRes.Load() }

// reservation is what the next renewal should reserve.
func (l *Lease) reservation() int64 {
	return max(l.seqRes.Load(), l.seqSent.Load()+SeqReservation)
}

// FinishStatus is the outcome of a finish or abandon.
type FinishStatus string

// Finish statuses.
const (
	// Finished: this call recorded the outcome.
	Finished FinishStatus = "ok"
	// FinishFenced: the lease is no longer held under this fence; nothing was
	// written.
	FinishFenced FinishStatus = "fenced"
	// FinishAlready: the attempt already has an outcome (first writer wins).
	FinishAlready FinishStatus = "finished"
	// FinishMissing: the attempt record is gone (Redis lost its data).
	FinishMissing FinishStatus = "missing"
)

// Outcome is what a finish records.
type Outcome struct {
	// Code is OutcomeOK or an error code.
	Code string
	// Result is the encoded result, published as is.
	Result []byte
	// Session is written to the session record in the same step; nil writes
	// nothing.
	Session SessionUpdate
}

// Finish is the fenced finish: in one script it records the outcome (first
// writer wins), writes the session record, drops the attempt from its order
// and releases the lease. A lease that is not Current is refused locally
// without a round trip. After Finished the lease has ended (released).
func (l *Lease) Finish(ctx context.Context, o Outcome) (FinishStatus, error) {
	if !l.Current() {
		return FinishFenced, nil
	}
	args := append([]any{l.attemptID, l.fence, o.Code, o.Result, l.k.store.retention.Milliseconds(), l.k.holder}, o.Session.args()...)
	st, err := l.k.store.script(ctx, nil, finishScript,
		[]string{l.keys.order(), l.keys.attempt(l.attemptID), l.keys.lease(), l.keys.session()}, args...).Text()
	if err != nil {
		return "", fmt.Errorf("finish: %w", err)
	}
	switch FinishStatus(st) {
	case Finished:
		l.release()
	case FinishFenced, FinishMissing:
		l.lose("finish refused (%s)", st)
	case FinishAlready:
		l.release()
	default:
		return "", fmt.Errorf("finish: unexpected reply %q", st)
	}
	return FinishStatus(st), nil
}

// Abandon records the outcome of an attempt whose lease was lost (code is
// lease_lost or the run's own error). It writes no session record. It works
// whether or not the lease is still held, as long as the attempt was claimed
// under this fence and has no outcome yet, or is recorded as accepted: its
// claim was lost with the Redis node that made it (a failover that lost
// writes), and this worker's outcome answers it.
func (l *Lease) Abandon(ctx context.Context, code string, result []byte) (FinishStatus, error) {
	st, err := abandonScript.Run(ctx, l.k.store.rdb,
		[]string{l.keys.order(), l.keys.attempt(l.attemptID), l.keys.lease()},
		l.attemptID, l.fence, code, result, l.k.store.retention.Milliseconds(), l.k.holder).Text()
	if err != nil {
		return "", fmt.Errorf("abandon: %w", err)
	}
	l.end(teamster.Errorf(teamster.CodeLeaseLost, "abandoned"))
	return FinishStatus(st), nil
}

// Unclaim gives the attempt back (accepted again, at the head of its order)
// when nothing acted on the claim yet, and ends the lease. It reports whether
// the attempt was given back; false means the fleet gave it an outcome meanwhile.
func (l *Lease) Unclaim(ctx context.Context) (bool, error) {
	n, err := unclaimScript.Run(ctx, l.k.store.rdb, []string{l.attemptKey, l.leaseKey}, l.fence, l.k.holder, l.attemptID).Int()
	l.release()
	if err != nil {
		return false, fmt.Errorf("unclaim: %w", err)
	}
	return n == 1, nil
}

// Release deletes the lease if it is still held under its fence, without
// recording an outcome, and ends it.
func (l *Lease) Release(ctx context.Context) error {
	_, err := releaseScript.Run(ctx, l.k.store.rdb, []string{l.keys.lease()}, l.fence, l.k.holder, l.attemptID).Int()
	l.release()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

func (l *Lease) release() { l.end(errReleased) }
