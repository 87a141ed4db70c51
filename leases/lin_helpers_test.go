package leases

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/testenv"
)

// The sequential specification of ONE session's lease, as the scripts
// implement it, and a driver that records histories of the real scripts for
// porcupine to check against it.
//
// acquire(client) is Store.Accept of a fresh attempt followed by Keeper.Claim.
// The two are recorded as two operations (enqueue, acquire), because the
// accept appends to the session's order, and the order is half of what
// decides "busy": a claim is busy while the lease is held, and also while an
// earlier attempt of the session is queued or claimed ahead of it. A client
// whose claim keeps coming back busy may withdraw its attempt (Store.Unaccept).
//
// The model's state is the fence hash (epoch, n), the lease (holder, attempt,
// fence, and when it expires), the order and the attempt records. Fences are
// <epoch>:<n>: n counts up by exactly one per claim within an epoch; a data
// loss (FLUSHALL, a restart without persistence) drops everything, and the
// next claim must start a new epoch never seen before, at n = 1, so a fence
// of an earlier epoch can never match again.
//
// Time. A lease granted or renewed by an operation that ran in [call, ret]
// expires at some instant in [call+TTL, ret+TTL] (Redis starts the TTL when
// it runs the script). An operation running in [call, ret] must see the lease
// when ret+slack < call'+TTL of the grant, must not see it when call >
// ret'+TTL+slack, and may see either in between; the model branches there
// (a porcupine NondeterministicModel). slack covers Redis's millisecond TTLs.
//
// Unknown outcomes. An operation that returned an error (Redis was being
// restarted) may or may not have taken effect, at some instant inside its own
// [call, ret]: go-redis gives up or retries before it returns, and a killed
// server cannot run a request later. Its output is "unknown" and the model
// allows both. (A paused server could run a request after the client gave
// up on it; these histories do not pause Redis.)
//
// The model is sound for a correct implementation: every branch it refuses
// is one the scripts cannot take, given the times recorded. It is not
// vacuous: TestLinearizabilityModel shows it refusing illegal histories, and
// the broken-script tests show it refusing real ones.

const (
	linTTL     = 200 * time.Millisecond
	linSlack   = 20 * time.Millisecond
	linClients = 4
	// linFaultClient is the ClientId of the operations that lose data.
	linFaultClient = linClients
)

type linKind int

const (
	linEnqueue  linKind = iota // Store.Accept of a fresh attempt: new | exists
	linAcquire                 // Keeper.Claim: claimed(fence) | busy | done | missing | expired
	linWithdraw                // Store.Unaccept: removed | kept
	linRenew                   // the renew script with the client's fence: ok | refused
	linRelease                 // the release script with the client's fence: ok | refused
	linFinish                  // Lease.Finish: ok | fenced | finished | missing
	linRead                    // Store.LeaseOf: held(holder, attempt, fence) | none
	linFlush                   // FLUSHALL: ok
	linRestart                 // redis-server restart without persistence: ok
)

func (k linKind) String() string {
	return [...]string{"enqueue", "acquire", "withdraw", "renew", "release", "finish", "read", "flush", "restart"}[k]
}

// Output statuses.
const (
	linUnknown  = "unknown"
	linOK       = "ok"
	linNew      = "new"
	linExists   = "exists"
	linRemoved  = "removed"
	linKept     = "kept"
	linRefused  = "refused"
	linHeld     = "held"
	linNone     = "none"
	linClaimed  = string(Claimed)
	linBusy     = string(ClaimBusy)
	linDone     = string(ClaimDone)
	linMissing  = string(ClaimMissing)
	linExpired  = string(ClaimExpired)
	linFenced   = string(FinishFenced)
	linFinished = string(FinishAlready)
)

// linInput is one operation's input. Call and Return are repeated here
// because the model reasons about lease expiry with them.
type linInput struct {
	Kind    linKind
	Client  int
	Attempt string
	Fence   string
	Call    int64 // ns since the history began
	Return  int64
	// Stale marks an operation a holder sent after sleeping past the TTL
	// without a renewal in between (for the non-vacuity checks).
	Stale bool
}

type linOutput struct {
	Status  string
	Fence   string // acquire: the fence granted; read: the lease's fence
	Holder  int    // read: the holder (client index), -1 when none
	Attempt string // read: the lease's attempt
}

// Epoch placeholders in model states.
const (
	// linUnseen is an epoch that exists in Redis but that no client has
	// seen: created by a claim whose reply was lost.
	linUnseen = "?"
	// linFresh marks, inside one step, the epoch a claim creates; it is
	// replaced by the epoch the claim returned (or by linUnseen).
	linFresh = "\x00fresh"
)

type linLease struct {
	client  int
	attempt string
	epoch   string
	n       int64
	lo, hi  int64 // it expires at some instant in [lo, hi] unless renewed
}

type linAttempt struct {
	id    string
	state byte // 'a' accepted, 'c' claimed, 'f' finished (has an outcome)
	epoch string
	n     int64
}

type linState struct {
	epoch string   // "" while the fence hash is missing (new session, data loss)
	n     int64    // the fence hash's counter
	used  []string // every epoch a client has seen
	lease *linLease
	order []string
	atts  []linAttempt // sorted by id
	cur   [linClients + 1]string
}

func (s *linState) clone() *linState {
	c := *s
	if s.lease != nil {
		l := *s.lease
		c.lease = &l
	}
	c.order = slices.Clone(s.order)
	c.atts = slices.Clone(s.atts)
	return &c
}

func (s *linState) att(id string) *linAttempt {
	i, ok := slices.BinarySearchFunc(s.atts, id, func(a linAttempt, id string) int { return strings.Compare(a.id, id) })
	if !ok {
		return nil
	}
	return &s.atts[i]
}

func (s *linState) putAtt(a linAttempt) {
	i, ok := slices.BinarySearchFunc(s.atts, a.id, func(a linAttempt, id string) int { return strings.Compare(a.id, id) })
	if ok {
		s.atts[i] = a
		return
	}
	s.atts = slices.Insert(s.atts, i, a)
}

func (s *linState) dropAtt(id string) {
	s.atts = slices.DeleteFunc(s.atts, func(a linAttempt) bool { return a.id == id })
}

// prune forgets attempt records nothing can reach any more: not in the order
// and no client's current attempt. Only the order walk and a client's own
// operations read records, so the rest of the history cannot tell.
func (s *linState) prune() {
	s.atts = slices.DeleteFunc(s.atts, func(a linAttempt) bool {
		return !slices.Contains(s.order, a.id) && !slices.Contains(s.cur[:], a.id)
	})
}

func (s *linState) lose() {
	s.epoch, s.n, s.lease, s.order, s.atts = "", 0, nil, nil, nil
}

func parseLinFence(f string) (string, int64, bool) {
	e, n, ok := strings.Cut(f, ":")
	if !ok || e == "" {
		return "", 0, false
	}
	v, err := strconv.ParseInt(n, 10, 64)
	return e, v, err == nil
}

// holds reports whether a fence presented by a client is the one the lease
// or record carries. An unseen epoch is nobody's fence.
func holds(epoch string, n int64, fence string) bool {
	e, v, ok := parseLinFence(fence)
	return ok && epoch != linUnseen && epoch != linFresh && e == epoch && v == n
}

// withTime returns the states the lease can be in when op runs: still held,
// expired (gone), or both when op's interval straddles the expiry window.
func (s *linState) withTime(in linInput) []*linState {
	if s.lease == nil {
		return []*linState{s}
	}
	slack := int64(linSlack)
	present := in.Return+slack < s.lease.lo
	gone := in.Call > s.lease.hi+slack
	expired := func() *linState { c := s.clone(); c.lease = nil; return c }
	switch {
	case present:
		return []*linState{s}
	case gone:
		return []*linState{expired()}
	default:
		return []*linState{s, expired()}
	}
}

// linResult is one possible outcome of an operation: its output and the
// state after it.
type linResult struct {
	out linOutput
	st  *linState
}

// spec is the sequential specification: every outcome op may have in s.
func (s *linState) spec(in linInput) []linResult {
	var res []linResult
	for _, t := range s.withTime(in) {
		res = append(res, t.step(in))
	}
	return res
}

// step applies op to s, the lease's presence already decided.
func (s *linState) step(in linInput) linResult {
	c := s.clone()
	ttl := int64(linTTL)
	switch in.Kind {
	case linEnqueue:
		c.cur[in.Client] = in.Attempt
		if c.att(in.Attempt) != nil {
			c.prune()
			return linResult{linOutput{Status: linExists}, c}
		}
		c.putAtt(linAttempt{id: in.Attempt, state: 'a'})
		c.order = append(c.order, in.Attempt)
		c.prune()
		return linResult{linOutput{Status: linNew}, c}

	case linAcquire:
		a := c.att(in.Attempt)
		if a == nil {
			return linResult{linOutput{Status: linMissing}, c}
		}
		if a.state != 'a' {
			return linResult{linOutput{Status: linDone}, c}
		}
		// Walk to the attempt's place, dropping heads that can never run.
		for len(c.order) > 0 && c.order[0] != in.Attempt {
			h := c.att(c.order[0])
			switch {
			case h == nil || h.state == 'f':
				c.order = c.order[1:]
			case h.state == 'c' && c.lease == nil:
				h.state = 'f' // worker_lost
				c.order = c.order[1:]
			default:
				c.prune()
				return linResult{linOutput{Status: linBusy}, c}
			}
		}
		c.order = slices.Clone(c.order)
		c.prune()
		if c.lease != nil {
			return linResult{linOutput{Status: linBusy}, c}
		}
		if c.epoch == "" {
			c.epoch, c.n = linFresh, 0
		}
		c.n++
		c.lease = &linLease{client: in.Client, attempt: in.Attempt, epoch: c.epoch, n: c.n, lo: in.Call + ttl, hi: in.Return + ttl}
		a = c.att(in.Attempt)
		a.state, a.epoch, a.n = 'c', c.epoch, c.n
		return linResult{linOutput{Status: linClaimed}, c}

	case linWithdraw:
		if a := c.att(in.Attempt); a != nil && a.state == 'a' {
			c.dropAtt(in.Attempt)
			c.order = slices.DeleteFunc(c.order, func(id string) bool { return id == in.Attempt })
			return linResult{linOutput{Status: linRemoved}, c}
		}
		return linResult{linOutput{Status: linKept}, c}

	case linRenew:
		if c.lease != nil && holds(c.lease.epoch, c.lease.n, in.Fence) {
			c.lease.lo, c.lease.hi = max(c.lease.lo, in.Call+ttl), in.Return+ttl
			return linResult{linOutput{Status: linOK}, c}
		}
		return linResult{linOutput{Status: linRefused}, c}

	case linRelease:
		if c.lease != nil && holds(c.lease.epoch, c.lease.n, in.Fence) {
			c.lease = nil
			return linResult{linOutput{Status: linOK}, c}
		}
		return linResult{linOutput{Status: linRefused}, c}

	case linFinish:
		a := c.att(in.Attempt)
		switch {
		case a == nil:
			return linResult{linOutput{Status: linMissing}, c}
		case a.state == 'f':
			return linResult{linOutput{Status: linFinished}, c}
		case !holds(a.epoch, a.n, in.Fence) || c.lease == nil || !holds(c.lease.epoch, c.lease.n, in.Fence):
			return linResult{linOutput{Status: linFenced}, c}
		}
		a.state = 'f'
		c.order = slices.DeleteFunc(c.order, func(id string) bool { return id == in.Attempt })
		c.lease = nil
		return linResult{linOutput{Status: linOK}, c}

	case linRead:
		if c.lease == nil {
			return linResult{linOutput{Status: linNone, Holder: -1}, c}
		}
		return linResult{linOutput{Status: linHeld, Holder: c.lease.client, Attempt: c.lease.attempt}, c}

	case linFlush, linRestart:
		c.lose()
		return linResult{linOutput{Status: linOK}, c}
	}
	panic(fmt.Sprintf("unknown op %v", in.Kind))
}

// setEpoch replaces the placeholder epoch of the current fence hash with e
// (the epoch a client has now seen, or linUnseen).
func (s *linState) setEpoch(e string) {
	from := s.epoch
	s.epoch = e
	if s.lease != nil && s.lease.epoch == from {
		s.lease.epoch = e
	}
	for i := range s.atts {
		if s.atts[i].epoch == from && s.atts[i].state != 'a' {
			s.atts[i].epoch = e
		}
	}
	if e != linUnseen {
		s.used = append(slices.Clip(s.used), e)
	}
}

// observe matches an observed fence against the epoch and counter the model
// expects; a placeholder epoch matches any epoch never seen before, which
// then becomes the current one.
func (s *linState) observe(epoch string, n int64, fence string) (*linState, bool) {
	e, v, ok := parseLinFence(fence)
	if !ok || v != n {
		return nil, false
	}
	if epoch != linFresh && epoch != linUnseen {
		return s, e == epoch
	}
	if slices.Contains(s.used, e) {
		return nil, false
	}
	c := s.clone()
	c.setEpoch(e)
	return c, true
}

// linStep is the NondeterministicModel's step.
func linStep(state, input, output any) []any {
	s := state.(*linState)
	in := input.(linInput)
	out := output.(linOutput)
	var next []any
	if out.Status == linUnknown {
		// No effect, or any effect the op could have had.
		c := s.clone()
		if in.Kind == linEnqueue {
			c.cur[in.Client] = in.Attempt
			c.prune()
		}
		next = append(next, c)
		for _, r := range s.spec(in) {
			if r.st.epoch == linFresh {
				r.st.setEpoch(linUnseen)
			}
			next = append(next, r.st)
		}
		return next
	}
	for _, r := range s.spec(in) {
		if r.out.Status != out.Status {
			continue
		}
		switch out.Status {
		case linClaimed:
			if st, ok := r.st.observe(r.st.lease.epoch, r.st.lease.n, out.Fence); ok {
				next = append(next, st)
			}
		case linHeld:
			if r.out.Holder != out.Holder || r.out.Attempt != out.Attempt {
				continue
			}
			if st, ok := r.st.observe(r.st.lease.epoch, r.st.lease.n, out.Fence); ok {
				next = append(next, st)
			}
		default:
			next = append(next, r.st)
		}
	}
	return next
}

func linEqual(a, b any) bool {
	x, y := a.(*linState), b.(*linState)
	if x.epoch != y.epoch || x.n != y.n || x.cur != y.cur || !slices.Equal(x.used, y.used) ||
		!slices.Equal(x.order, y.order) || !slices.Equal(x.atts, y.atts) {
		return false
	}
	if (x.lease == nil) != (y.lease == nil) {
		return false
	}
	return x.lease == nil || *x.lease == *y.lease
}

func linHash(a any) uint64 {
	s := a.(*linState)
	h := fnv.New64a()
	fmt.Fprint(h, s.epoch, s.n, len(s.used), s.order, len(s.atts), s.cur)
	for _, at := range s.atts {
		fmt.Fprint(h, at.id, at.state, at.epoch, at.n)
	}
	if s.lease != nil {
		fmt.Fprint(h, *s.lease)
	}
	return h.Sum64()
}

// linModel is the lease of one session, checked by porcupine.
var linModel = (&porcupine.NondeterministicModel{
	Init:  func() []any { return []any{&linState{}} },
	Step:  linStep,
	Equal: linEqual,
	Hash:  linHash,
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		s := fmt.Sprintf("%s(c%d", in.Kind, in.Client)
		if in.Attempt != "" {
			s += " " + in.Attempt
		}
		if in.Fence != "" {
			s += " " + in.Fence
		}
		s += ") -> " + out.Status
		if out.Fence != "" {
			s += " " + out.Fence
		}
		if out.Status == linHeld {
			s += fmt.Sprintf(" by c%d/%s", out.Holder, out.Attempt)
		}
		return s
	},
	DescribeState: func(state any) string {
		s := state.(*linState)
		l := "none"
		if s.lease != nil {
			l = fmt.Sprintf("c%d/%s %s:%d", s.lease.client, s.lease.attempt, s.lease.epoch, s.lease.n)
		}
		return fmt.Sprintf("epoch %q n %d lease %s order %v", s.epoch, s.n, l, s.order)
	},
}).ToModel()

// linHistory records operations with their call and return times.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	count atomic.Int64
}

func newLinHistory() *linHistory { return &linHistory{start: time.Now()} }

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(client int, in linInput, out linOutput) {
	in.Client = client
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: in.Return})
	h.mu.Unlock()
	h.count.Add(1)
}

// linStats counts what a history exercised, so that a passing check cannot
// be vacuous.
type linStats struct {
	ops, unknown, claimed, busy, renewOK, staleRenews, staleRenewRefused, finishOK, staleFinishFenced, staleFinishFinished, releaseOK,
	readsHeld, withdrawn, dataLosses, epochs, epochChanges int
}

func (h *linHistory) stats() linStats {
	var st linStats
	epochs := map[string]bool{}
	for _, op := range h.ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		st.ops++
		if in.Kind == linRenew && in.Stale {
			st.staleRenews++
		}
		switch {
		case out.Status == linUnknown:
			st.unknown++
		case in.Kind == linAcquire && out.Status == linClaimed:
			st.claimed++
			e, _, _ := parseLinFence(out.Fence)
			epochs[e] = true
		case in.Kind == linAcquire && out.Status == linBusy:
			st.busy++
		case in.Kind == linRenew && out.Status == linOK:
			st.renewOK++
		case in.Kind == linRenew && out.Status == linRefused && in.Stale:
			st.staleRenewRefused++
		case in.Kind == linFinish && out.Status == linOK:
			st.finishOK++
		case in.Kind == linFinish && in.Stale && out.Status == linFenced:
			st.staleFinishFenced++
		case in.Kind == linFinish && in.Stale && out.Status == linFinished:
			st.staleFinishFinished++
		case in.Kind == linRelease && out.Status == linOK:
			st.releaseOK++
		case in.Kind == linRead && out.Status == linHeld:
			st.readsHeld++
		case in.Kind == linWithdraw && out.Status == linRemoved:
			st.withdrawn++
		case in.Kind == linFlush || in.Kind == linRestart:
			st.dataLosses++
		}
	}
	st.epochs = len(epochs)
	st.epochChanges = max(len(epochs)-1, 0)
	return st
}

func (st *linStats) add(o linStats) {
	st.ops += o.ops
	st.unknown += o.unknown
	st.claimed += o.claimed
	st.busy += o.busy
	st.renewOK += o.renewOK
	st.staleRenews += o.staleRenews
	st.staleRenewRefused += o.staleRenewRefused
	st.finishOK += o.finishOK
	st.staleFinishFenced += o.staleFinishFenced
	st.staleFinishFinished += o.staleFinishFinished
	st.releaseOK += o.releaseOK
	st.readsHeld += o.readsHeld
	st.withdrawn += o.withdrawn
	st.dataLosses += o.dataLosses
	st.epochs += o.epochs
	st.epochChanges += o.epochChanges
}

// linHold is a client's hold on the session: the Lease Keeper.Claim
// returns, or, for a broken claim script, a bare fence finished through the
// finish script (so that the test builds no Lease by hand).
type linHold interface {
	Fence() string
	Finish(ctx context.Context, o Outcome) (FinishStatus, error)
}

// linClaimFunc claims an attempt: Keeper.Claim, or a broken variant. The
// hold is nil unless the status is Claimed.
type linClaimFunc func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, error)

// linDriver drives the real scripts from concurrent clients.
type linDriver struct {
	store *Store
	claim linClaimFunc
	renew *redis.Script
	// renewAfterSleep makes a holder that slept past the TTL renew next,
	// so that every such sleep yields a stale renewal.
	renewAfterSleep bool
}

// linStoreOn is storeOn with a client that neither retries nor waits for a
// server to come back: a request that meets a restarting Redis fails at once,
// so histories hold operations whose outcome is unknown.
func linStoreOn(t *testing.T, addr string) *Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: 5 * time.Millisecond})
	c.AddHook(&slotHook{t: t})
	t.Cleanup(func() { c.Close() })
	s := NewStore(c)
	if err := s.Load(context.Background()); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	return s
}

func keeperClaim(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, error) {
	l, res, err := k.Claim(ctx, session, attemptID, "codex")
	if err != nil || l == nil {
		return nil, res.Status, err
	}
	return l, res.Status, nil
}

func realLinDriver(s *Store) *linDriver {
	return &linDriver{store: s, claim: keeperClaim, renew: renewScript}
}

// claimWithScript runs another claim script with the claim script's
// documented keys and arguments, for the broken variants.
func claimWithScript(script *redis.Script) linClaimFunc {
	return func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, error) {
		keys := keysFor(session)
		res, err := script.Run(ctx, k.store.rdb,
			[]string{keys.order(), keys.attempt(attemptID), keys.lease(), keys.fence(), keys.session(), keys.node()},
			attemptID, k.holder, k.ttl.Milliseconds(), newEpoch(), SeqReservation, keys.prefix(), FinishedTTL.Milliseconds(),
			newEpoch(), 0, "codex", // a claim token; no quarantine; the harness
		).StringSlice()
		if err != nil {
			return nil, "", err
		}
		if ClaimStatus(res[0]) != Claimed {
			return nil, ClaimStatus(res[0]), nil
		}
		return &scriptHold{store: k.store, keys: keys, holder: k.holder, attemptID: attemptID, fence: res[1]}, Claimed, nil
	}
}

// scriptHold finishes through the finish script, as Lease.Finish does.
type scriptHold struct {
	store     *Store
	keys      sessionKeys
	holder    string
	attemptID string
	fence     string
}

func (h *scriptHold) Fence() string { return h.fence }

func (h *scriptHold) Finish(ctx context.Context, o Outcome) (FinishStatus, error) {
	st, err := finishScript.Run(ctx, h.store.rdb,
		[]string{h.keys.order(), h.keys.attempt(h.attemptID), h.keys.lease(), h.keys.session()},
		h.attemptID, h.fence, o.Code, o.Result, FinishedTTL.Milliseconds(), h.holder).Text()
	return FinishStatus(st), err
}

// linFault is a data loss injected into a round.
type linFault string

const (
	faultFlush   linFault = "flush"
	faultRestart linFault = "restart"
)

// round records one history: linClients clients doing opsPerClient
// operations each on one session, the faults injected while they run.
func (d *linDriver) round(t *testing.T, r *testenv.Redis, session string, seed uint64, opsPerClient int, faults []linFault) *linHistory {
	t.Helper()
	h := newLinHistory()
	var wg sync.WaitGroup
	for c := 0; c < linClients; c++ {
		// The keepers run on a clock that never moves: a lease ends locally
		// only through the client's own operations, so Lease.Finish always
		// goes to Redis, and the history is about what Redis decided.
		k := NewKeeper(KeeperParams{Store: d.store, Holder: fmt.Sprintf("c%d", c), TTL: linTTL,
			Clock: clockwork.NewFakeClockAt(time.Unix(1, 0)), Logger: quietLogger(),
			// The model covers the scripts; the quarantine after a data loss
			// has its own test.
			NewEpochQuarantine: -1})
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			d.client(t, h, k, c, session, rand.New(rand.NewPCG(seed, uint64(c))), opsPerClient)
		}(c)
	}
	total := int64(linClients * opsPerClient)
	for i, f := range faults {
		// Spread the faults over the middle of the round.
		at := total * int64(i+1) / int64(len(faults)+1)
		for h.count.Load() < at {
			time.Sleep(time.Millisecond)
		}
		in := linInput{Call: h.now()}
		switch f {
		case faultFlush:
			in.Kind = linFlush
			c := r.Client()
			err := c.FlushAll(ctx).Err()
			c.Close()
			if err != nil {
				t.Fatalf("flushall: %v", err)
			}
		case faultRestart:
			// Down for a moment, so that requests meet a dead server.
			in.Kind = linRestart
			if err := r.Stop(); err != nil {
				t.Fatalf("stop redis: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
			if err := r.Start(); err != nil {
				t.Fatalf("start redis: %v", err)
			}
		}
		in.Return = h.now()
		h.add(linFaultClient, in, linOutput{Status: linOK, Holder: -1})
	}
	wg.Wait()
	return h
}

// client is one worker-like client: it queues an attempt, claims it (busy:
// retry, sometimes withdraw), and while it holds the lease renews, reads,
// finishes or releases it, and sometimes sleeps past the TTL first, as a
// paused process would.
func (d *linDriver) client(t *testing.T, h *linHistory, k *Keeper, c int, session string, rng *rand.Rand, ops int) {
	var (
		next    int // attempt ids: c<client>-<next>
		attempt string
		queued  bool
		busy    int
		lease   linHold
		stale   bool
	)
	drop := func() { attempt, queued, busy, lease, stale = "", false, 0, nil, false }
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
			l, status, err := d.claim(ctx, k, session, attempt)
			switch {
			case err != nil:
				// Maybe claimed: claim again, as a redelivery would
				// (done says the lost call claimed it).
				out.Status = linUnknown
			case status == Claimed:
				out.Status, out.Fence = linClaimed, l.Fence()
				queued, lease = false, l
			case status == ClaimBusy:
				out.Status = linBusy
				busy++
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
				out.Status = linRefused
				drop()
			}

		case p < 0.7:
			// The release script: Lease.Release does not say whether it
			// released anything.
			in.Kind, in.Fence = linRelease, lease.Fence()
			n, err := releaseScript.Run(ctx, d.store.rdb, []string{keys.lease()}, lease.Fence(), k.holder, attempt).Int()
			out.Status = map[bool]string{true: linOK, false: linRefused}[n == 1]
			if err != nil {
				out.Status = linUnknown
			}
			drop()

		default:
			in.Kind, in.Fence = linFinish, lease.Fence()
			st, err := lease.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{}`)})
			out.Status = string(st)
			if err != nil {
				// Maybe finished: keep the hold, whose next finish or
				// renewal tells.
				out.Status = linUnknown
				break
			}
			drop()
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
