package leases

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
)

// KeeperParams configures a Keeper.
type KeeperParams struct {
	Store *Store
	// Holder is the worker id written into every lease.
	Holder string
	// TTL of each lease in Redis; default 10s.
	TTL time.Duration
	// Margin: a lease without a successful renewal for TTL - Margin is
	// considered lost locally, before Redis lets it expire; default TTL/5.
	Margin time.Duration
	// Interval between renewal rounds; default TTL/3.
	Interval time.Duration
	// Clock; default the real clock. Tests inject a fake one.
	Clock clockwork.Clock
	// Logger; default logrus's standard logger.
	Logger logrus.FieldLogger
	// OnRenew, when set, is called after every renewal round with the number
	// of leases sent and the round's error (nil when Redis answered).
	OnRenew func(n int, err error)
	// OnLost, when set, is called once for every lease that is lost.
	OnLost func(l *Lease, err error)
	// NewEpochQuarantine is how long after the fleet first saw a Redis node
	// serve a slot (a promoted replica, a restarted or emptied node) no new
	// fence epoch may start in it: at least the longest lease TTL in the
	// fleet, stretched by the clocks' rate drift, so that every lease the
	// slot's previous node granted has self-fenced first (docs/ARCHITECTURE.md,
	// "Fencing across failovers"). 0 means TTL; negative means none (only for
	// a Redis known to be fresh, as in tests).
	NewEpochQuarantine time.Duration
}

// Keeper holds a worker's leases and renews them all in one pipelined round
// trip per interval (asynq's heartbeater shape: one goroutine, one loop). A
// lease that Redis refuses, or that goes without a successful renewal for
// ttl - margin, is lost: its Done closes.
type Keeper struct {
	store      *Store
	holder     string
	ttl        time.Duration
	margin     time.Duration
	interval   time.Duration
	clock      clockwork.Clock
	log        logrus.FieldLogger
	onRenew    func(int, error)
	onLost     func(*Lease, error)
	quarantine time.Duration

	// Reaper index updates sent beside the claims (moveIndex); pointing
	// counts the mover goroutine while it runs.
	movesMu  sync.Mutex
	moves    []indexMove
	moving   bool
	pointing sync.WaitGroup

	mu     sync.Mutex
	leases map[*Lease]struct{}

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// NewKeeper returns a keeper; Start begins renewing.
func NewKeeper(p KeeperParams) *Keeper {
	if p.TTL <= 0 {
		p.TTL = 10 * time.Second
	}
	if p.Margin <= 0 || p.Margin >= p.TTL {
		p.Margin = p.TTL / 5
	}
	if p.Interval <= 0 {
		p.Interval = p.TTL / 3
	}
	if p.Clock == nil {
		p.Clock = clockwork.NewRealClock()
	}
	if p.NewEpochQuarantine == 0 {
		p.NewEpochQuarantine = p.TTL
	}
	if p.Logger == nil {
		p.Logger = logrus.StandardLogger()
	}
	return &Keeper{
		store: p.Store, holder: p.Holder, ttl: p.TTL, margin: p.Margin, interval: p.Interval,
		clock: p.Clock, log: p.Logger, onRenew: p.OnRenew, onLost: p.OnLost, quarantine: p.NewEpochQuarantine,
		leases: make(map[*Lease]struct{}), stop: make(chan struct{}),
	}
}

// TTL is the lease TTL.
func (k *Keeper) TTL() time.Duration { return k.ttl }

// Start runs the renewal loop until Stop.
func (k *Keeper) Start() {
	k.wg.Add(1)
	go k.run()
}

// Stop ends the renewal loop and waits for it. Leases still held are not
// released: without renewals they self-fence and expire, as they would if the
// process died.
func (k *Keeper) Stop() {
	k.stopOnce.Do(func() { close(k.stop) })
	k.wg.Wait()
	k.pointing.Wait()
}

func (k *Keeper) run() {
	defer k.wg.Done()
	t := k.clock.NewTicker(k.interval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.Chan():
			k.RenewNow(context.Background())
		}
	}
}

// Len is the number of leases held.
func (k *Keeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.leases)
}

// Leases returns the leases held.
func (k *Keeper) Leases() []*Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Lease, 0, len(k.leases))
	for l := range k.leases {
		out = append(out, l)
	}
	return out
}

func (k *Keeper) forget(l *Lease) {
	k.mu.Lock()
	delete(k.leases, l)
	k.mu.Unlock()
}

func (k *Keeper) lost(l *Lease, err error) {
	k.log.WithFields(logrus.Fields{"session": l.Tag(), "attempt": l.attemptID, "fence": l.fence}).
		Warn("lease lost: " + err.Error())
	if k.onLost != nil {
		k.onLost(l, err)
	}
}

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

	// BlockerLeased is ClaimResult.BlockerState for a blocker that holds
	// the session's lease.
	BlockerLeased = "leased"

	// claimQuarantine is the script's reply for a new epoch that must wait;
	// Claim reports it as ClaimBusy with Wait.
	claimQuarantine ClaimStatus = "quarantine"
)

// ClaimResult is the outcome of Claim.
type ClaimResult struct {
	Status ClaimStatus
	// Blocker is the attempt ahead of this one when Busy, and BlockerState
	// what it is doing: StateAccepted or StateClaimed (an earlier head of
	// the session's order), or BlockerLeased (it holds the session's lease).
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
	Session *SessionRecord
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
			k.nudge(keys.tag, res[2])
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
		k.nudge(keys.tag, attemptID)
		return nil, cr, nil
	case claimQuarantine:
		// A new epoch on a node the fleet has just seen serve the session's
		// slot: a lease granted before (on the node that served it then) may
		// still be running. Busy until the quarantine has passed.
		if len(res) > 2 {
			k.nudge(keys.tag, res[2])
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
	k.nudge(keys.tag, res[4])
	if ms, err := strconv.ParseInt(res[2], 10, 64); err == nil {
		cr.ClaimedAt = time.UnixMilli(ms)
	}
	if ms, err := strconv.ParseInt(res[3], 10, 64); err == nil {
		cr.Accepted = time.UnixMilli(ms)
	}
	if fields := res[5:]; len(fields) >= 2 {
		cr.Session = sessionFrom(fieldPairs(fields))
	}
	l := &Lease{k: k, keys: keys, sessionKey: sessionKey, attemptID: attemptID, fence: res[1], done: make(chan struct{}),
		leaseKey: keys.lease(), attemptKey: keys.attempt(attemptID)}
	l.lastOK.Store(sentAt.UnixNano())
	l.seqRes.Store(SeqReservation)
	// Under the lease's lock: with a short TTL the timer can fire (and end
	// the lease, which reads the field) before the assignment.
	l.mu.Lock()
	l.timer = k.clock.AfterFunc(k.ttl-k.margin, l.selfFence)
	l.mu.Unlock()
	k.mu.Lock()
	k.leases[l] = struct{}{}
	k.mu.Unlock()
	// Point the reaper at the lease's expiry, so a worker that dies is found
	// within TTL plus the reaper interval, not at the queue deadline. It is
	// sent beside the run, not before it: it is in another slot, so it
	// cannot join the claim script, and the run need not wait for it (XX: an
	// entry the finish already removed is not re-created).
	k.moveIndex(indexMove{key: keys.index(), member: indexMember(keys.tag, attemptID), score: float64(time.Now().Add(k.ttl).UnixMilli())})
	return l, cr, nil
}

// nudge points the reapers at the attempts named (space-separated ids): a
// claim's walk settled them, or the claim found one claimed or settled
// before. Their index entries may still sit at their queue deadlines (a
// claim whose reply was lost never moved them).
func (k *Keeper) nudge(tag, settled string) {
	now := float64(time.Now().UnixMilli())
	for _, id := range strings.Fields(settled) {
		k.moveIndex(indexMove{key: indexKeyOf(tag), member: indexMember(tag, id), score: now})
	}
}

// indexMove is one reaper index update: ZADD XX key score member.
type indexMove struct {
	key    string // the index shard
	member string
	score  float64
}

// maxIndexBatch bounds the members of one ZADD.
const maxIndexBatch = 1000

// moveIndex queues reaper index updates, sent beside the caller by one mover
// goroutine at a time: whatever is queued when it is free goes in one ZADD
// XX, so a burst of claims costs a few round trips and one goroutine, not
// one of each per claim. XX: an entry already removed (published) is never
// re-created.
func (k *Keeper) moveIndex(m indexMove) {
	k.movesMu.Lock()
	k.moves = append(k.moves, m)
	start := !k.moving
	k.moving = true
	k.movesMu.Unlock()
	if start {
		k.pointing.Add(1)
		go k.mover()
	}
}

// mover sends the queued index updates until none is left.
func (k *Keeper) mover() {
	defer k.pointing.Done()
	for {
		k.movesMu.Lock()
		batch := k.moves
		if len(batch) > maxIndexBatch {
			batch, k.moves = batch[:maxIndexBatch:maxIndexBatch], batch[maxIndexBatch:]
		} else {
			k.moves = nil
		}
		if len(batch) == 0 {
			k.moving = false
			k.movesMu.Unlock()
			return
		}
		k.movesMu.Unlock()
		shards := map[string][]redis.Z{}
		for _, m := range batch {
			shards[m.key] = append(shards[m.key], redis.Z{Score: m.score, Member: m.member})
		}
		ctx, cancel := context.WithTimeout(context.Background(), k.ttl)
		_, err := k.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for key, zs := range shards {
				p.ZAddXX(ctx, key, zs...)
			}
			return nil
		})
		cancel()
		if err != nil {
			k.log.WithField("entries", len(batch)).Warn("reaper index not updated (claimed attempts are found at their queue deadline instead of their lease expiry): " + err.Error())
		}
	}
}

// RenewNow renews every held lease in one pipelined round trip: one renew
// script per lease and one ZADD per reaper index shard that moves the
// leases' index entries to their new expiry. The keeper's loop calls it every interval.
func (k *Keeper) RenewNow(ctx context.Context) {
	leases := k.Leases()
	if len(leases) == 0 {
		return
	}
	// Self-fencing runs on each lease's own timer, so a slow round cannot
	// delay it; the timeout only keeps a hung connection from holding the
	// loop past the next round.
	ctx, cancel := context.WithTimeout(ctx, k.interval)
	defer cancel()
	sentAt := k.clock.Now()
	cmds, reserved, err := k.renewPipeline(ctx, leases)
	if isNoScript(err) {
		if lerr := k.store.Load(ctx); lerr == nil {
			cmds, reserved, err = k.renewPipeline(ctx, leases)
		}
	}
	if k.onRenew != nil {
		k.onRenew(len(leases), err)
	}
	if err != nil && cmds == nil {
		k.log.WithField("leases", len(leases)).Warn("lease renewal failed: " + err.Error())
		return
	}
	failed := 0
	for i, l := range leases {
		n, cerr := cmds[i].Int()
		switch {
		case cerr != nil:
			failed++
		case n == 1:
			l.renewed(sentAt, reserved[i])
		default:
			l.lose("renewal refused: the lease expired or is held under another fence")
		}
	}
	if failed > 0 {
		k.log.WithField("leases", failed).Warn("lease renewal failed: " + err.Error())
	}
}

func (k *Keeper) renewPipeline(ctx context.Context, leases []*Lease) ([]*redis.Cmd, []int64, error) {
	cmds := make([]*redis.Cmd, len(leases))
	reserved := make([]int64, len(leases))
	ttlMs := strconv.FormatInt(k.ttl.Milliseconds(), 10)
	expiry := float64(time.Now().Add(k.ttl).UnixMilli())
	shards := map[string][]redis.Z{}
	_, err := k.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range leases {
			reserved[i] = l.reservation()
			cmds[i] = renewScript.EvalSha(ctx, p, l.renewKeys(), l.fence, ttlMs, reserved[i], k.holder, l.attemptID)
			key := l.keys.index()
			shards[key] = append(shards[key], redis.Z{Score: expiry, Member: l.indexMember()})
		}
		for key, zs := range shards {
			p.ZAddXX(ctx, key, zs...)
		}
		return nil
	})
	if err != nil {
		for _, c := range cmds {
			if isNoScript(c.Err()) {
				return nil, nil, c.Err()
			}
		}
	}
	return cmds, reserved, err
}
