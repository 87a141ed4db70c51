package leases

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
)

// linDriver drives the real scripts from concurrent clients.
type linDriver struct {
	store *Store
	claim linClaimFunc
	renew *redis.Script
	// renewAfterSleep makes a holder that slept past the TTL renew next,
	// so that every such sleep yields a stale renewal.
	renewAfterSleep bool
	// withdrawOrphans makes a client whose claims keep naming the same
	// attempt withdraw it: after a failover the promoted replica's order
	// holds orphans (attempts withdrawn, or claimed and finished, on the
	// old primary after the detach), which nobody claims and which would
	// hold the session until their queue deadline.
	withdrawOrphans bool
	// clients is how many clients a round runs (linClients when 0). A
	// lone client's lease, once lost, is never taken over, so its abandon
	// succeeds: with linClients the others' claims usually record the
	// lost claim's outcome (worker_lost) first.
	clients int
}

// on is the driver with its clients on another store (a round's own
// replicated Redis).
func (d *linDriver) on(s *Store) *linDriver {
	c := *d
	c.store = s
	return &c
}

func realLinDriver(s *Store) *linDriver {
	return &linDriver{store: s, claim: keeperClaim, renew: renewScript}
}

// linFault is a fault injected into a round: a data loss, or one half of a
// failover (detach, then promote; only on replicated nodes).
type linFault string

const (
	faultFlush   linFault = "flush"
	faultRestart linFault = "restart"
	faultDetach  linFault = "detach"
	faultPromote linFault = "promote"
)

// round records one history: d.clients clients doing opsPerClient
// operations each on one session, the faults injected into nodes while they
// run. The driver's store must be nodes' (linNodes.store, or linStoreOn the
// single node).
func (d *linDriver) round(t *testing.T, nodes *linNodes, session string, seed uint64, opsPerClient int, faults []linFault) *linHistory {
	t.Helper()
	if err := nodes.check(faults); err != nil {
		t.Fatalf("faults %v: %v", faults, err)
	}
	h := newLinHistory()
	var wg sync.WaitGroup
	clients := d.clients
	if clients == 0 {
		clients = linClients
	}
	keepers := make([]*Keeper, clients)
	for c := range keepers {
		// The keepers run on a clock that never moves: a lease ends locally
		// only through the client's own operations, so Lease.Finish always
		// goes to Redis, and the history is about what Redis decided.
		k := NewKeeper(KeeperParams{Store: d.store, Holder: fmt.Sprintf("c%d", c), TTL: linTTL,
			Clock: clockwork.NewFakeClockAt(time.Unix(1, 0)), Logger: quietLogger(),
			// The model covers the scripts; the quarantine after a data loss
			// or a failover has its own tests.
			NewEpochQuarantine: -1})
		keepers[c] = k
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			d.client(t, h, k, c, session, rand.New(rand.NewPCG(seed, uint64(c))), opsPerClient)
		}(c)
	}
	// The faults are spread over the middle of the round; with a failover,
	// over its first half, so that the clients have a while on the promoted
	// replica, once the orphans the failover left (attempts withdrawn or
	// claimed on the old primary after the detach) are withdrawn.
	total := int64(clients * opsPerClient)
	at := func(i int) int64 { return total * int64(i+1) / int64(len(faults)+1) }
	if slices.Contains(faults, faultPromote) {
		at = func(i int) int64 { return total * int64(i+1) / int64(2*(len(faults)+1)) }
	}
	for i, f := range faults {
		for h.count.Load() < at(i) {
			time.Sleep(time.Millisecond)
		}
		in := linInput{Call: h.now()}
		switch f {
		case faultFlush:
			in.Kind = linFlush
			nodes.flush(t)
		case faultRestart:
			in.Kind = linRestart
			nodes.restart(t)
		case faultDetach:
			in.Kind = linDetach
			nodes.detach(t)
		case faultPromote:
			in.Kind = linPromote
			nodes.promote(t)
		}
		in.Return = h.now()
		h.add(linFaultClient, in, linOutput{Status: linOK, Holder: -1})
	}
	wg.Wait()
	for _, k := range keepers {
		k.Stop()
	}
	return h
}

// client is one worker-like client: it queues an attempt, claims it (busy:
// retry, sometimes withdraw it, or the orphan ahead of it), and while it
// holds the lease renews, reads, finishes or releases it, and sometimes
// sleeps past the TTL first, as a paused process would. A client that finds
// its lease lost abandons the attempt.
func (d *linDriver) client(t *testing.T, h *linHistory, k *Keeper, c int, session string, rng *rand.Rand, ops int) {
	var (
		next    int // attempt ids: c<client>-<next>
		attempt string
		queued  bool
		busy    int
		lease   linHold
		stale   bool
		lost    bool // the lease was refused: abandon the attempt next
		// blocker is the attempt the busy claims (of this client's
		// attempts, one after the other) have named since blockedSince,
		// blocked times in a row.
		blocker      string
		blockedSince time.Time
		blocked      int
	)
	drop := func() { attempt, queued, busy, lease, stale, lost = "", false, 0, nil, false, false }
	keys := keysFor(session)
	for i := 0; i < ops; i++ {
		in := linInput{Attempt: attempt, Stale: stale}
		var out linOutput
		out.Holder = -1
		in.Call = h.now()
		p := rng.Float64()
		if stale && lease != nil && d.renewAfterSleep {
			p = 0.3 // the renewal case below
		}
		switch {
		case p < 0.08:
			in.Kind, in.Attempt, in.Stale = linRead, "", false
			info, err := d.store.LeaseOf(ctx, session)
			switch {
			case err == ErrNotFound:
				out.Status = linNone
			case err != nil:
				out.Status = linUnknown
			default:
				out.Status, out.Fence, out.Attempt = linHeld, info.Fence, info.AttemptID
				out.Holder, _ = strconv.Atoi(strings.TrimPrefix(info.Holder, "c"))
			}

		case attempt == "":
			next++
			// Ids are unique across rounds: a round's session is its own,
			// and an id still claimed by an earlier round's session would
			// be refused (ErrAttemptIDTaken) after a moment in the order.
			attempt = fmt.Sprintf("%s/c%d-%d", session, c, next)
			in.Kind, in.Attempt = linEnqueue, attempt
			a, err := d.store.Accept(ctx, AcceptArgs{SessionKey: session, AttemptID: attempt, HarnessID: "codex",
				QueueTimeout: time.Minute, RunBudget: time.Minute})
			switch {
			case errors.Is(err, ErrAttemptIDTaken):
				// Not an outcome the model knows: the id was queued and
				// withdrawn inside the call.
				t.Errorf("enqueue %s: %v (attempt ids must be unique across rounds)", attempt, err)
				return
			case err != nil:
				// Maybe queued: claim it anyway, as a resubmit would
				// (missing says it was not).
				out.Status, queued = linUnknown, true
			case a.New:
				out.Status, queued = linNew, true
			default:
				out.Status = linExists
				drop()
			}

		case lost:
			// As a worker records lease_lost once its lease is refused.
			in.Kind, in.Fence = linAbandon, lease.Fence()
			st, err := lease.Abandon(ctx, "lease_lost", []byte(`{}`))
			out.Status = string(st)
			if err != nil {
				out.Status = linUnknown
			}
			drop()

		case d.withdrawOrphans && queued && blocked >= 3 && time.Since(blockedSince) > linOrphan && p < 0.5:
			// The same attempt has been ahead for a while: maybe an
			// orphan. Withdraw it.
			in.Kind, in.Attempt, in.Blocker = linWithdraw, blocker, true
			removed, err := d.store.Unaccept(ctx, session, blocker)
			out.Status = map[bool]string{true: linRemoved, false: linKept}[removed]
			if err != nil {
				out.Status = linUnknown
			}
			blocker, blocked = "", 0

		case queued && busy >= 3 && p < 0.3:
			in.Kind = linWithdraw
			removed, err := d.store.Unaccept(ctx, session, attempt)
			out.Status = map[bool]string{true: linRemoved, false: linKept}[removed]
			if err != nil {
				out.Status = linUnknown
			}
			drop()

		case queued:
			in.Kind = linAcquire
			l, status, by, err := d.claim(ctx, k, session, attempt)
			switch {
			case err != nil:
				// Maybe claimed: claim again, as a redelivery would
				// (done says the lost call claimed it).
				out.Status = linUnknown
			case status == Claimed:
				out.Status, out.Fence = linClaimed, l.Fence()
				queued, lease = false, l
				blocker, blocked = "", 0
			case status == ClaimBusy:
				out.Status = linBusy
				busy++
				if by != blocker {
					blocker, blockedSince, blocked = by, time.Now(), 0
				}
				blocked++
			default:
				out.Status = string(status)
				drop()
			}

		case p < 0.25 && !stale:
			// Sleep past the TTL, as a paused holder would; the next
			// operation on the lease is stale. Not an operation.
			time.Sleep(linTTL + 3*linSlack)
			stale = true
			i--
			continue

		case p < 0.6:
			// The renew script, as the keeper's round sends it for one
			// lease (the keepers' clocks never move, so nothing local
			// depends on it).
			in.Kind, in.Fence = linRenew, lease.Fence()
			n, err := d.renew.Run(ctx, d.store.rdb, []string{keys.lease(), keys.attempt(attempt)},
				lease.Fence(), linTTL.Milliseconds(), SeqReservation, k.holder, attempt).Int()
			switch {
			case err != nil:
				out.Status = linUnknown
			case n == 1:
				out.Status, stale = linOK, false
			default:
				out.Status, lost = linRefused, true
			}

		case p < 0.7:
			// The release script: Lease.Release does not say whether it
			// released anything.
			in.Kind, in.Fence = linRelease, lease.Fence()
			n, err := releaseScript.Run(ctx, d.store.rdb, []string{keys.lease()}, lease.Fence(), k.holder, attempt).Int()
			switch {
			case err != nil:
				out.Status = linUnknown
				drop()
			case n == 1:
				out.Status = linOK
				drop()
			default:
				out.Status, lost = linRefused, true
			}

		default:
			in.Kind, in.Fence = linFinish, lease.Fence()
			st, err := lease.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{}`)})
			out.Status = string(st)
			switch {
			case err != nil:
				// Maybe finished: keep the hold, whose next finish or
				// renewal tells.
				out.Status = linUnknown
			case st == FinishFenced:
				lost = true
			default:
				drop()
			}
		}
		in.Return = h.now()
		h.add(c, in, out)
		if out.Status == linUnknown {
			time.Sleep(100 * time.Millisecond) // Redis is down: back off
		} else if out.Status == linBusy {
			time.Sleep(time.Duration(10+rng.IntN(30)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
	}
}
