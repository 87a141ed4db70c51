package leases

// The Keeper is one actor, in asynq's shape (heartbeat.go, recoverer.go): a
// struct, a params struct, a constructor, a start that runs one select loop,
// a shutdown (Start, Stop). Who owns what:
//
//   - The loop goroutine (loop) owns every piece of the keeper's mutable
//     state, in a loopState no other goroutine sees: the set of held leases,
//     the renewal ticker, whether a renewal round is in flight (and whether
//     a tick came during it), the queue of reaper index moves and whether a
//     batch of them is in flight. Adds (a claim's lease and its index moves),
//     removals (a lease that ended), ticks, queries (Len, RenewNow's
//     snapshot) and Start's ticker reach it through channels.
//   - The loop never waits for Redis: a claim hands it its lease while a
//     renewal round or an index write may be in flight, and must not wait
//     behind either. On a tick it starts the round on a goroutine of its own
//     with a snapshot of the held leases, and when moves are queued and none
//     is in flight it starts one ZADD XX batch the same way (the index mover
//     is folded into the loop; index.go holds its Redis side). Each reports
//     back to the loop when it ends; at most one of each is in flight, and
//     they only read what they were handed.
//   - A Lease's own state (its last renewal, its event seqs, why it ended,
//     its self-fence timer) is the Lease's: its holder, the round that renews
//     it and its timer all use it, under the lease's own lock and atomics.
//     Self-fencing runs on each lease's own timer, not in the loop, so that
//     nothing the loop or a round does can delay it.
//   - Claim (claim.go) runs on its caller's goroutine: the claim script is a
//     round trip the loop must not wait for. It hands the resulting lease and
//     its index moves to the loop in one message.
//
// The loop starts with Start, or, for a keeper that is used without Start
// (tests and benchmarks drive RenewNow by hand), with its first claim; it does
// not tick until Start. A keeper that was used must be stopped. On Stop the
// loop stops ticking and taking adds, removals and moves (their senders see
// the keeper stopped and go on), lets the round and the index batch in flight
// end, sends the moves already queued, and returns.
//
// One clock: every local time reading of the keeper and its leases (claim and
// renewal send times, Current, the self-fence timers, the renewal ticker) is
// the injected clockwork.Clock. Two readings are not local and stay on the
// wall clock, said where they are made: reaper index scores (indexScore),
// which Redis compares with its own TIME in the reaper's due script, as the
// Store's Accept and MarkPublished scores are; and the timeouts of Redis
// round trips (context.WithTimeout), which go-redis turns into socket
// deadlines, so a fake clock's time would make them meaningless.

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/sirupsen/logrus"
)

// KeeperParams configures a Keeper.
type KeeperParams struct {
	Store *Store
	// Holder is the worker id written into every lease.
	Holder string
	// TTL of each lease in Redis; default 10s. Leases are renewed every
	// TTL/3; a lease without a successful renewal for TTL - TTL/5 (the
	// margin) is considered lost locally, before Redis lets it expire.
	TTL time.Duration
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
// trip per interval (ttl/3). A lease that Redis refuses, or that goes without
// a successful renewal for ttl - margin, is lost: its Err is lease_lost and the keeper's OnLost is told. See the
// comment at the top of this file for which goroutine owns what.
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

	// The loop's inbox. Senders also select on quit, so that nothing waits
	// on a stopped keeper.
	adopts     chan adoption         // a claim's lease and index moves
	forgets    chan *Lease           // a lease that ended
	queries    chan chan []*Lease    // the leases held
	arm        chan clockwork.Ticker // Start's renewal ticker
	roundEnded chan struct{}         // the round the loop started has ended
	batchSent  chan int              // the index batch the loop started was written (its size)

	// pointing counts the index moves handed to the loop and not yet
	// written (or dropped): tests wait on it to see them land.
	pointing sync.WaitGroup

	startOnce  sync.Once
	launchOnce sync.Once
	launched   chan struct{} // closed when the loop starts
	quit       chan struct{} // closed by Stop
	stopOnce   sync.Once
	exited     chan struct{}  // closed when the loop has returned
	final      []*Lease       // what the loop held when it returned; set before exited closes
	wg         sync.WaitGroup // the loop and the round and index batch it starts
}

// adoption is what a claim hands the loop: the new lease (nil when the claim
// got none) and the reaper index moves to send beside the run.
type adoption struct {
	lease *Lease
	moves []indexMove
}

// NewKeeper returns a keeper; Start begins renewing.
func NewKeeper(p KeeperParams) *Keeper {
	if p.TTL <= 0 {
		p.TTL = 10 * time.Second
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
		store: p.Store, holder: p.Holder, ttl: p.TTL, margin: p.TTL / 5, interval: p.TTL / 3,
		clock: p.Clock, log: p.Logger, onRenew: p.OnRenew, onLost: p.OnLost, quarantine: p.NewEpochQuarantine,
		adopts: make(chan adoption), forgets: make(chan *Lease), queries: make(chan chan []*Lease),
		arm: make(chan clockwork.Ticker), roundEnded: make(chan struct{}), batchSent: make(chan int),
		launched: make(chan struct{}), quit: make(chan struct{}), exited: make(chan struct{}),
	}
}

// Start begins the renewal rounds, every interval until Stop. The ticker is
// made here, before Start returns, so a fake clock advanced right after
// Start moves it. Later calls change nothing.
func (k *Keeper) Start() {
	k.startOnce.Do(func() {
		if !k.launch() {
			return // stopped before it started
		}
		t := k.clock.NewTicker(k.interval)
		select {
		case k.arm <- t:
		case <-k.quit:
			t.Stop()
		}
	})
}

// Stop ends the renewal loop and waits for it, and for the round and the
// index moves it had in flight or queued. Leases still held are not released:
// without renewals they self-fence and expire, as they would if the process
// died.
func (k *Keeper) Stop() {
	// A keeper never used is never launched: no Start or claim after Stop
	// starts the loop.
	k.launchOnce.Do(func() {})
	k.stopOnce.Do(func() { close(k.quit) })
	k.wg.Wait()
}

// launch starts the loop the first time the keeper is used (Start or a
// claim), and reports whether it was ever started (false: Stop came first).
func (k *Keeper) launch() bool {
	k.launchOnce.Do(func() {
		k.wg.Add(1)
		close(k.launched)
		go k.loop()
	})
	return k.isLaunched()
}

func (k *Keeper) isLaunched() bool {
	select {
	case <-k.launched:
		return true
	default:
		return false
	}
}

// loopState is the keeper's mutable state. Only the loop goroutine touches it.
type loopState struct {
	held        map[*Lease]struct{}
	ticker      clockwork.Ticker // nil until Start
	renewing    bool             // a renewal round is in flight
	tickPending bool             // a tick came during it: another round follows it at once
	moves       []indexMove      // reaper index moves queued
	moving      bool             // an index batch is in flight
	stopping    bool             // Stop was called
}

// loop is the keeper's one goroutine: it serves the inbox until Stop, then
// until nothing it started is in flight or queued.
func (k *Keeper) loop() {
	defer k.wg.Done()
	s := &loopState{held: make(map[*Lease]struct{})}
	quit, adopts, forgets, arm := k.quit, k.adopts, k.forgets, k.arm
	var tick <-chan time.Time
	for !s.stopping || s.renewing || s.moving || len(s.moves) > 0 {
		select {
		case <-quit:
			// No more ticks, adds, removals or moves: their senders see quit.
			// What is in flight, and the moves already queued, go on.
			s.stopping = true
			quit, adopts, forgets, arm, tick = nil, nil, nil, nil, nil
			if s.ticker != nil {
				s.ticker.Stop()
			}
		case t := <-arm:
			s.ticker, tick = t, t.Chan()
		case <-tick:
			// A tick during a round is kept (as a ticker keeps one), and its
			// round starts when the round in flight ends.
			if s.renewing {
				s.tickPending = true
			} else {
				k.startRound(s)
			}
		case <-k.roundEnded:
			s.renewing = false
			if s.tickPending && !s.stopping {
				s.tickPending = false
				k.startRound(s)
			}
		case a := <-adopts:
			// A lease whose self-fence timer fired before it got here has
			// ended, and its removal may have come first: it is not held. One
			// that ends after this check sends its removal after it.
			if a.lease != nil && a.lease.Err() == nil {
				s.held[a.lease] = struct{}{}
			}
			s.moves = append(s.moves, a.moves...)
			k.sendMoves(s)
		case l := <-forgets:
			delete(s.held, l)
		case reply := <-k.queries:
			reply <- s.list() // buffered: the loop never waits on a reader
		case n := <-k.batchSent:
			s.moving = false
			k.pointing.Add(-n)
			k.sendMoves(s)
		}
	}
	k.final = s.list()
	close(k.exited)
}

// list is the leases held. Once the keeper is stopping, removals are no longer
// sent to the loop, so it leaves out the leases that have ended.
func (s *loopState) list() []*Lease {
	out := make([]*Lease, 0, len(s.held))
	for l := range s.held {
		if !s.stopping || l.Err() == nil {
			out = append(out, l)
		}
	}
	return out
}

// startRound starts a renewal round of the leases held, on its own goroutine,
// which tells the loop when it has ended.
func (k *Keeper) startRound(s *loopState) {
	leases := s.list()
	if len(leases) == 0 {
		return
	}
	s.renewing = true
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.renew(context.Background(), leases)
		k.roundEnded <- struct{}{}
	}()
}

// sendMoves starts writing the queued index moves (up to maxIndexBatch, in
// one ZADD XX per shard) unless a batch is in flight: whatever is queued when
// the previous batch is written goes in the next, so a burst of claims costs a
// few round trips, not one per claim.
func (k *Keeper) sendMoves(s *loopState) {
	if s.moving || len(s.moves) == 0 {
		return
	}
	batch := s.moves
	if len(batch) > maxIndexBatch {
		batch, s.moves = batch[:maxIndexBatch:maxIndexBatch], batch[maxIndexBatch:]
	} else {
		s.moves = nil
	}
	s.moving = true
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.writeIndex(batch)
		k.batchSent <- len(batch)
	}()
}

// adopt hands a claim's lease (nil for none) and its index moves to the loop.
// A stopped keeper takes neither: the lease self-fences on its own timer, as
// it would if the process had died.
func (k *Keeper) adopt(l *Lease, moves []indexMove) {
	if l == nil && len(moves) == 0 {
		return
	}
	k.pointing.Add(len(moves))
	if k.launch() {
		select {
		case k.adopts <- adoption{lease: l, moves: moves}:
			return
		case <-k.quit:
		}
	}
	k.pointing.Add(-len(moves))
}

// forget tells the loop that l ended. When it returns the loop has dropped l
// (or the keeper is stopped).
func (k *Keeper) forget(l *Lease) {
	if !k.isLaunched() {
		return // Stop came before any claim: nothing is held
	}
	select {
	case k.forgets <- l:
	case <-k.quit:
	}
}

// held asks the loop for the leases held; after Stop, the leases it held
// when it stopped that have not ended since.
func (k *Keeper) held() []*Lease {
	if !k.isLaunched() {
		return nil
	}
	reply := make(chan []*Lease, 1)
	select {
	case k.queries <- reply:
		return <-reply
	case <-k.exited:
	}
	out := make([]*Lease, 0, len(k.final))
	for _, l := range k.final {
		if l.Err() == nil {
			out = append(out, l)
		}
	}
	return out
}

// Len is the number of leases held.
func (k *Keeper) Len() int { return len(k.held()) }

func (k *Keeper) lost(l *Lease, err error) {
	k.log.WithFields(logrus.Fields{"session": l.keys.tag, "attempt": l.attemptID, "fence": l.fence}).
		Warn("lease lost: " + err.Error())
	if k.onLost != nil {
		k.onLost(l, err)
	}
}
