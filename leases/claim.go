package leases

// Claim stays a Keeper method, a thin one: it runs the claim script on its
// caller's goroutine and hands the lease it got, with the reaper index moves
// due beside the run, to the keeper's loop in one message (Keeper.adopt). It
// touches none of the keeper's mutable state itself.
//
// Moving it to the Store (the Store claims, the keeper adopts) is not
// simpler: what the script is called with is the keeper's (its holder, TTL
// and new-epoch quarantine), the lease's self-fence deadline counts from the
// claim's send time on the keeper's clock, and the lease renews, fences and
// forgets itself through its keeper. A Store claim would take all of that as
// arguments and return a lease bound to nothing, and Keeper.Claim would still
// be needed (worker/, bench/ and the tests call it) to bind and adopt it: two
// entry points where there is one now.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/teamster-fleet/teamster"
)

// ClaimStatus is the outcome of a claim.
type ClaimStatus string

// Claim statuses.
const (
	// Claimed: the attempt is claimed under a new lease.
	Claimed ClaimStatus = "claimed"
	// ClaimBusy: an earlier attempt of the session is queued or running, or
	// the session's lease is held. Try again later.
	ClaimBusy ClaimStatus = "busy"
	// ClaimDone: the attempt was claimed before or has an outcome; drop it.
	ClaimDone ClaimStatus = "done"
	// ClaimExpired: the attempt's queue deadline passed; queue_timeout is
	// recorded and the reaper publishes it.
	ClaimExpired ClaimStatus = "expired"
	// ClaimMissing: no record of the attempt (Redis lost its data, or the
	// router withdrew it).
	ClaimMissing ClaimStatus = "missing"
	// ClaimForeign: the attempt was accepted for another harness (State
	// names it); the message is not the accepted attempt: drop it. Nothing
	// changed.
	ClaimForeign ClaimStatus = "foreign"

	// blockerLeased is ClaimResult.BlockerState for a blocker that holds
	// the session's lease.
	blockerLeased = "leased"

	// claimQuarantine is the script's reply for a new epoch that must wait;
	// Claim reports it as ClaimBusy with Wait.
	claimQuarantine ClaimStatus = "quarantine"
)

// ClaimResult is the outcome of Claim.
type ClaimResult struct {
	Status ClaimStatus
	// Blocker is the attempt ahead of this one when Busy, and BlockerState
	// what it is doing: StateAccepted or "claimed" (an earlier head of
	// the session's order), or "leased" (it holds the session's lease).
	Blocker, BlockerState string
	// Wait, when set with Busy, is how long before the claim can succeed
	// (the quarantine of a new fence epoch after a failover, a restart or a
	// data loss of the Redis node serving the session).
	Wait time.Duration
	// State is the attempt's state when Done, and the harness it was
	// accepted for when Foreign.
	State string
	// Accepted and ClaimedAt are the attempt's acceptance and claim times
	// (Redis's clock) when Claimed: the queue wait is their difference.
	Accepted, ClaimedAt time.Time
	// Session is the session's record as the claim read it, under the new
	// lease; nil when the session has none.
	Session *teamster.SessionRecord
}

// Claim runs the claim script for attemptID of sessionKey, delivered for
// harnessID, and, when it is claimed, holds and renews the new lease. An
// attempt is claimed only for the harness it was accepted for (otherwise
// ClaimForeign). The returned lease is nil unless the status is Claimed.
func (k *Keeper) Claim(ctx context.Context, sessionKey, attemptID, harnessID string) (*Lease, ClaimResult, error) {
	keys := keysFor(sessionKey)
	quarantine := max(k.quarantine, 0)
	sentAt := k.clock.Now()
	res, err := k.store.script(ctx, nil, claimScript,
		[]string{keys.order(), keys.attempt(attemptID), keys.lease(), keys.fence(), keys.session(), keys.node()},
		attemptID, k.holder, k.ttl.Milliseconds(), newEpoch(), SeqReservation, keys.prefix(), k.store.retention.Milliseconds(),
		newEpoch(), quarantine.Milliseconds(), harnessID,
	).StringSlice()
	if err != nil {
		return nil, ClaimResult{}, fmt.Errorf("claim: %w", err)
	}
	if len(res) == 0 {
		return nil, ClaimResult{}, fmt.Errorf("claim: empty reply")
	}
	cr := ClaimResult{Status: ClaimStatus(res[0])}
	switch cr.Status {
	case Claimed:
	case ClaimBusy:
		if len(res) > 1 {
			cr.Blocker = res[1]
		}
		if len(res) > 2 {
			k.adopt(nil, nudges(keys.tag, res[2]))
		}
		if len(res) > 3 {
			cr.BlockerState = res[3]
		}
		return nil, cr, nil
	case ClaimDone, ClaimExpired:
		if len(res) > 1 {
			cr.State = res[1]
		}
		// Claimed before (a redelivery), finished, or past its queue
		// deadline: point the reapers at it now. When an earlier claim's
		// reply was lost, its worker never moved the index entry off the
		// queue deadline, and the outcome would wait for it to be published.
		// The reaper decides from the record; XX creates no entry for an
		// attempt already published.
		k.adopt(nil, nudges(keys.tag, attemptID))
		return nil, cr, nil
	case claimQuarantine:
		// A new epoch on a node the fleet has just seen serve the session's
		// slot: a lease granted before (on the node that served it then) may
		// still be running. Busy until the quarantine has passed.
		if len(res) > 2 {
			k.adopt(nil, nudges(keys.tag, res[2]))
		}
		ms, _ := strconv.ParseInt(res[1], 10, 64)
		return nil, ClaimResult{Status: ClaimBusy, Blocker: "the quarantine of a new fence epoch (a Redis failover, restart or data loss)",
			Wait: time.Duration(ms) * time.Millisecond}, nil
	case ClaimMissing:
		return nil, cr, nil
	case ClaimForeign:
		if len(res) > 1 {
			cr.State = res[1]
		}
		return nil, cr, nil
	default:
		return nil, ClaimResult{}, fmt.Errorf("claim: unexpected reply %q", res)
	}
	if len(res) < 5 {
		return nil, ClaimResult{}, fmt.Errorf("claim: unexpected reply %q", res)
	}
	moves := nudges(keys.tag, res[4])
	if ms, err := strconv.ParseInt(res[2], 10, 64); err == nil {
		cr.ClaimedAt = time.UnixMilli(ms)
	}
	if ms, err := strconv.ParseInt(res[3], 10, 64); err == nil {
		cr.Accepted = time.UnixMilli(ms)
	}
	if fields := res[5:]; len(fields) >= 2 {
		cr.Session = sessionFrom(fieldPairs(fields))
	}
	l := &Lease{k: k, keys: keys, attemptID: attemptID, fence: res[1], done: make(chan struct{}),
		leaseKey: keys.lease(), attemptKey: keys.attempt(attemptID)}
	l.lastOK.Store(sentAt.UnixNano())
	l.seqRes.Store(SeqReservation)
	// Under the lease's lock: with a short TTL the timer can fire (and end
	// the lease, which reads the field) before the assignment.
	l.mu.Lock()
	l.timer = k.clock.AfterFunc(k.ttl-k.margin, l.selfFence)
	l.mu.Unlock()
	// Point the reaper at the lease's expiry, so a worker that dies is found
	// within TTL plus the reaper interval, not at the queue deadline. It is
	// sent beside the run, not before it: it is in another slot, so it
	// cannot join the claim script, and the run need not wait for it (XX: an
	// entry the finish already removed is not re-created).
	moves = append(moves, indexMove{key: keys.index(), member: indexMember(keys.tag, attemptID), score: indexScore(k.ttl)})
	k.adopt(l, moves)
	return l, cr, nil
}
