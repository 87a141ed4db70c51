package leases

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
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
// whose claim keeps coming back busy may withdraw its attempt (Store.Unaccept),
// or the attempt that has headed the order for long (an orphan: its owner's
// claim or withdrawal was lost with a failed primary's writes). A holder that
// finds its lease lost abandons its attempt (Lease.Abandon, lease_lost), as a
// worker does.
//
// The model's state is the fence hash (epoch, n), the lease (holder, attempt,
// fence, and when it expires), the order and the attempt records. Fences are
// <epoch>:<n>: n counts up by exactly one per claim within an epoch; a data
// loss (FLUSHALL, a restart without persistence) drops everything, and the
// next claim must start a new epoch never seen before, at n = 1, so a fence
// of an earlier epoch can never match again.
//
// Failovers. A round may run against a primary and a replica instead of one
// redis-server, with a failover made of two fault operations. detach makes
// the replica an exact copy of the primary at one instant and ends its
// replication (linNodes.detach): the model keeps a copy of its state at the
// detach's linearization point (the snapshot). The clients go on against the
// primary, whose acknowledged writes from then on will be lost. promote kills
// the primary and points the clients at the replica: the model's state
// becomes the snapshot and, as after a data loss, the next claim must start
// an epoch never seen before at n = 1 (the promoted node has another
// replication id, so the claim script starts a new epoch; a script that
// continued the snapshot's epoch would hand out again fences that the old
// primary handed out after the detach). Lease expiry is replicated as an
// absolute time, so a lease in the snapshot keeps its expiry window; what
// the old primary did after the detach (renewals included) is lost with it.
// An operation that overlaps the promote ran on the old primary before it
// was killed or on the promoted replica after the switch (or, when it
// failed, maybe on neither, as after a restart): porcupine places it before
// or after the promote, as it places an operation that overlaps a restart.
//
// Time. A lease granted or renewed by an operation that ran in [call, ret]
// expires at some instant in [call+TTL, ret+TTL] (Redis starts the TTL when
// it runs the script). An operation running in [call, ret] must see the lease
// when ret+slack < call'+TTL of the grant, must not see it when call >
// ret'+TTL+slack, and may see either in between; the model branches there
// (a porcupine NondeterministicModel). slack covers Redis's millisecond TTLs.
//
// Unknown outcomes. An operation that returned an error (Redis was being
// restarted or killed) may or may not have taken effect, at some instant
// inside its own [call, ret]: go-redis gives up (the clients never retry)
// before it returns, and a killed server cannot run a request later. Its
// output is "unknown" and the model allows both. (A paused server could run
// a request after the client gave up on it; the only pause is the detach's
// CLIENT PAUSE WRITE, which ends well within the clients' read timeout, so a
// request it holds runs while its client still waits.)
//
// The model is sound for a correct implementation: every branch it refuses
// is one the scripts cannot take, given the times recorded. It is not
// vacuous: TestLinearizabilityModel shows it refusing illegal histories, and
// the broken-script tests show it refusing real ones.

const (
	linTTL     = 200 * time.Millisecond
	linSlack   = 20 * time.Millisecond
	linClients = 4
	// linFaultClient is the ClientId of the fault operations (data losses,
	// failovers).
	linFaultClient = linClients
	// linOrphan is how long an attempt must have been named by every busy
	// claim of a client before the client withdraws it as an orphan (in a
	// round with a failover). It may be an attempt whose owner is about to
	// claim it, behind a lease: withdrawing it is legal all the same (its
	// owner's claim then finds it missing).
	linOrphan = linTTL / 2
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
	linAbandon                 // Lease.Abandon after the lease was found lost: ok | fenced | finished | missing
	linDetach                  // the replica stops replicating, an exact copy of the primary: ok
	linPromote                 // the primary is killed and the clients go to the replica: ok
)

func (k linKind) String() string {
	return [...]string{"enqueue", "acquire", "withdraw", "renew", "release", "finish", "read", "flush", "restart",
		"abandon", "detach", "promote"}[k]
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
	// Blocker marks a withdraw of the attempt another client's claims kept
	// meeting at the head of the order, not of the client's own (for the
	// statistics; the model treats both alike).
	Blocker bool
}

type linOutput struct {
	Status  string
	Fence   string // acquire: the fence granted; read: the lease's fence
	Holder  int    // read: the holder (client index), -1 when none
	Attempt string // read: the lease's attempt
}

// Epoch placeholders in model states.
const (
	// linUnseen prefixes an epoch that exists in Redis but that no client
	// has seen: created by a claim whose reply was lost. They are numbered
	// ("?1", "?2", ...), so that one in the replica's snapshot and one the
	// old primary created after the detach are never taken for each other.
	linUnseen = "?"
	// linFresh marks, inside one step, the epoch a claim creates; it is
	// replaced by the epoch the claim returned (or by an unseen one).
	linFresh = "\x00fresh"
)

// placeholder reports whether an epoch of a model state stands for one that
// no client has seen.
func placeholder(e string) bool { return e == linFresh || strings.HasPrefix(e, linUnseen) }

type linLease struct {
	client  int
	attempt string
	epoch   string
	n       int64
	lo, hi  int64 // it expires at some instant in [lo, hi] unless renewed
}

// heldBy reports whether the lease is held by client, for attempt, under
// fence: the scripts compare all three.
func (l *linLease) heldBy(client int, attempt, fence string) bool {
	return l != nil && l.client == client && l.attempt == attempt && holds(l.epoch, l.n, fence)
}

type linAttempt struct {
	id    string
	state byte // 'a' accepted, 'c' claimed, 'f' finished (has an outcome)
	epoch string
	n     int64
}

type linState struct {
	// epoch is "" while the next claim must start a new epoch: the fence
	// hash is missing (a new session, a data loss) or began on another node
	// (on a promoted replica).
	epoch string
	n     int64    // the fence hash's counter
	used  []string // every epoch a client has seen, on any node
	lease *linLease
	order []string
	atts  []linAttempt // sorted by id
	cur   [linClients + 1]string
	// snap is the detached replica's copy of the session (epoch, n, lease,
	// order, atts) from the detach to the promote; nil otherwise. It is
	// never changed in place (rename copies it), so clones share it.
	snap *linState
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

// snapshot is the replica's copy of s at the detach: Redis's data only, not
// the epochs clients have seen nor their current attempts.
func (s *linState) snapshot() *linState {
	c := s.clone()
	c.used, c.cur, c.snap = nil, [linClients + 1]string{}, nil
	return c
}

// promoted is the state once the clients use the promoted replica: the
// snapshot's data with the clients' knowledge as it is now (used, cur), and
// a fence hash that began on another node, so that the next claim starts a
// new epoch.
func (s *linState) promoted() *linState {
	if s.snap == nil {
		panic("promote without a detach")
	}
	c := s.snap.clone()
	c.used, c.cur = s.used, s.cur
	c.epoch, c.n = "", 0
	c.prune()
	return c
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
// operations read records (a withdrawn blocker was in the order), so the
// rest of the history cannot tell.
func (s *linState) prune() {
	s.atts = slices.DeleteFunc(s.atts, func(a linAttempt) bool {
		return !slices.Contains(s.order, a.id) && !slices.Contains(s.cur[:], a.id)
	})
}

// lose is a data loss of the node the clients use. A detached replica's
// copy is another node's data and stays.
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
	return ok && !placeholder(epoch) && e == epoch && v == n
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
	if in.Kind == linFlush || in.Kind == linRestart || in.Kind == linPromote {
		// The lease goes whether or not it expired first.
		return []linResult{s.step(in)}
	}
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
		if c.lease.heldBy(in.Client, in.Attempt, in.Fence) {
			c.lease.lo, c.lease.hi = max(c.lease.lo, in.Call+ttl), in.Return+ttl
			return linResult{linOutput{Status: linOK}, c}
		}
		return linResult{linOutput{Status: linRefused}, c}

	case linRelease:
		if c.lease.heldBy(in.Client, in.Attempt, in.Fence) {
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
		case !holds(a.epoch, a.n, in.Fence) || !c.lease.heldBy(in.Client, in.Attempt, in.Fence):
			return linResult{linOutput{Status: linFenced}, c}
		}
		a.state = 'f'
		c.order = slices.DeleteFunc(c.order, func(id string) bool { return id == in.Attempt })
		c.lease = nil
		return linResult{linOutput{Status: linOK}, c}

	case linAbandon:
		// First writer wins. An attempt still accepted was claimed on a
		// node whose writes were lost (a failover): its worker's outcome
		// answers it all the same. (A retry of the same abandon would be
		// answered ok; the driver never sends one.)
		a := c.att(in.Attempt)
		switch {
		case a == nil:
			return linResult{linOutput{Status: linMissing}, c}
		case a.state == 'f':
			return linResult{linOutput{Status: linFinished}, c}
		case a.state != 'a' && !holds(a.epoch, a.n, in.Fence):
			return linResult{linOutput{Status: linFenced}, c}
		}
		a.state = 'f'
		c.order = slices.DeleteFunc(c.order, func(id string) bool { return id == in.Attempt })
		if c.lease.heldBy(in.Client, in.Attempt, in.Fence) {
			c.lease = nil
		}
		return linResult{linOutput{Status: linOK}, c}

	case linRead:
		if c.lease == nil {
			return linResult{linOutput{Status: linNone, Holder: -1}, c}
		}
		return linResult{linOutput{Status: linHeld, Holder: c.lease.client, Attempt: c.lease.attempt}, c}

	case linFlush, linRestart:
		c.lose()
		return linResult{linOutput{Status: linOK}, c}

	case linDetach:
		c.snap = c.snapshot()
		return linResult{linOutput{Status: linOK}, c}

	case linPromote:
		return linResult{linOutput{Status: linOK}, c.promoted()}
	}
	panic(fmt.Sprintf("unknown op %v", in.Kind))
}

// rename replaces the placeholder epoch from with e everywhere: in the fence
// hash, the lease and the records, and in the replica's copy, which holds
// the same epoch when the placeholder was made before the detach (one made
// after it has another number).
func (s *linState) rename(from, e string) {
	if s.epoch == from {
		s.epoch = e
	}
	if s.lease != nil && s.lease.epoch == from {
		s.lease.epoch = e
	}
	for i := range s.atts {
		if s.atts[i].epoch == from && s.atts[i].state != 'a' {
			s.atts[i].epoch = e
		}
	}
	if s.snap != nil && s.snap.mentions(from) {
		s.snap = s.snap.clone()
		s.snap.rename(from, e)
	}
}

// mentions reports whether epoch e appears in s or its replica's copy.
func (s *linState) mentions(e string) bool {
	if s.epoch == e || (s.lease != nil && s.lease.epoch == e) {
		return true
	}
	return slices.ContainsFunc(s.atts, func(a linAttempt) bool { return a.epoch == e }) ||
		(s.snap != nil && s.snap.mentions(e))
}

// unseen names a new unseen epoch: the first number no placeholder in s has.
func (s *linState) unseen() string {
	for i := 1; ; i++ {
		if e := linUnseen + strconv.Itoa(i); !s.mentions(e) {
			return e
		}
	}
}

// observe matches an observed fence against the epoch and counter the model
// expects; a placeholder epoch matches any epoch never seen before, which
// then replaces it.
func (s *linState) observe(epoch string, n int64, fence string) (*linState, bool) {
	e, v, ok := parseLinFence(fence)
	if !ok || v != n {
		return nil, false
	}
	if !placeholder(epoch) {
		return s, e == epoch
	}
	if slices.Contains(s.used, e) {
		return nil, false
	}
	c := s.clone()
	c.rename(epoch, e)
	c.used = append(slices.Clip(c.used), e)
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
				r.st.rename(linFresh, r.st.unseen())
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

func linEqual(a, b any) bool { return a.(*linState).equal(b.(*linState)) }

func (s *linState) equal(o *linState) bool {
	if s == nil || o == nil {
		return s == o
	}
	if s.epoch != o.epoch || s.n != o.n || s.cur != o.cur || !slices.Equal(s.used, o.used) ||
		!slices.Equal(s.order, o.order) || !slices.Equal(s.atts, o.atts) || !s.snap.equal(o.snap) {
		return false
	}
	if (s.lease == nil) != (o.lease == nil) {
		return false
	}
	return s.lease == nil || *s.lease == *o.lease
}

func linHash(a any) uint64 {
	h := fnv.New64a()
	a.(*linState).hash(h)
	return h.Sum64()
}

func (s *linState) hash(h io.Writer) {
	fmt.Fprint(h, s.epoch, s.n, len(s.used), s.order, len(s.atts), s.cur)
	for _, at := range s.atts {
		fmt.Fprint(h, at.id, at.state, at.epoch, at.n)
	}
	if s.lease != nil {
		fmt.Fprint(h, *s.lease)
	}
	if s.snap != nil {
		fmt.Fprint(h, "replica")
		s.snap.hash(h)
	}
}

func (s *linState) describe() string {
	l := "none"
	if s.lease != nil {
		l = fmt.Sprintf("c%d/%s %s:%d", s.lease.client, s.lease.attempt, s.lease.epoch, s.lease.n)
	}
	d := fmt.Sprintf("epoch %q n %d lease %s order %v", s.epoch, s.n, l, s.order)
	if s.snap != nil {
		d += "; the detached replica: " + s.snap.describe()
	}
	return d
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
	DescribeState: func(state any) string { return state.(*linState).describe() },
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
	readsHeld, withdrawn, blockersWithdrawn, abandonOK, dataLosses, epochs, epochChanges int
	// failovers counts promotes; lostWrites the acknowledged writes made on
	// the old primary between a detach and its promote (all lost);
	// claimsAfterFailover the claims granted on a promoted replica.
	failovers, lostWrites, claimsAfterFailover int
	// fencesTwice counts fences granted to more than one claim (never, by a
	// correct implementation; the model refuses them).
	fencesTwice int
}

func (h *linHistory) stats() linStats {
	var st linStats
	epochs := map[string]bool{}
	fences := map[string]int{}
	// The windows of lost writes (from a detach's return to its promote's
	// call) and the promotes' returns.
	type window struct{ from, to int64 }
	var lost []window
	var promoted []int64
	var detachedAt int64 = -1
	for _, op := range h.ops {
		switch op.Input.(linInput).Kind {
		case linDetach:
			detachedAt = op.Return
		case linPromote:
			lost = append(lost, window{detachedAt, op.Call})
			promoted = append(promoted, op.Return)
		}
	}
	for _, op := range h.ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		st.ops++
		if in.Kind == linRenew && in.Stale {
			st.staleRenews++
		}
		write := false
		switch {
		case out.Status == linUnknown:
			st.unknown++
		case in.Kind == linAcquire && out.Status == linClaimed:
			st.claimed++
			write = true
			e, _, _ := parseLinFence(out.Fence)
			epochs[e] = true
			if fences[out.Fence]++; fences[out.Fence] == 2 {
				st.fencesTwice++
			}
			if slices.ContainsFunc(promoted, func(at int64) bool { return op.Call > at }) {
				st.claimsAfterFailover++
			}
		case in.Kind == linAcquire && out.Status == linBusy:
			st.busy++
		case in.Kind == linRenew && out.Status == linOK:
			st.renewOK++
			write = true
		case in.Kind == linRenew && out.Status == linRefused && in.Stale:
			st.staleRenewRefused++
		case in.Kind == linFinish && out.Status == linOK:
			st.finishOK++
			write = true
		case in.Kind == linFinish && in.Stale && out.Status == linFenced:
			st.staleFinishFenced++
		case in.Kind == linFinish && in.Stale && out.Status == linFinished:
			st.staleFinishFinished++
		case in.Kind == linRelease && out.Status == linOK:
			st.releaseOK++
			write = true
		case in.Kind == linRead && out.Status == linHeld:
			st.readsHeld++
		case in.Kind == linWithdraw && out.Status == linRemoved:
			st.withdrawn++
			if in.Blocker {
				st.blockersWithdrawn++
			}
			write = true
		case in.Kind == linAbandon && out.Status == linOK:
			st.abandonOK++
			write = true
		case in.Kind == linEnqueue && out.Status == linNew:
			write = true
		case in.Kind == linFlush || in.Kind == linRestart:
			st.dataLosses++
		case in.Kind == linPromote:
			st.failovers++
		}
		if write && slices.ContainsFunc(lost, func(w window) bool { return op.Call > w.from && op.Return < w.to }) {
			st.lostWrites++
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
	st.blockersWithdrawn += o.blockersWithdrawn
	st.abandonOK += o.abandonOK
	st.dataLosses += o.dataLosses
	st.epochs += o.epochs
	st.epochChanges += o.epochChanges
	st.failovers += o.failovers
	st.lostWrites += o.lostWrites
	st.claimsAfterFailover += o.claimsAfterFailover
	st.fencesTwice += o.fencesTwice
}

// linHold is a client's hold on the session: the Lease Keeper.Claim
// returns, or, for a broken claim script, a bare fence finished and
// abandoned through the scripts (so that the test builds no Lease by hand).
type linHold interface {
	Fence() string
	Finish(ctx context.Context, o Outcome) (FinishStatus, error)
	Abandon(ctx context.Context, code string, result []byte) (FinishStatus, error)
}

// linClaimFunc claims an attempt: Keeper.Claim, or a broken variant. The
// hold is nil unless the status is Claimed; blocker is the attempt a busy
// claim names.
type linClaimFunc func(ctx context.Context, k *Keeper, session, attemptID string) (hold linHold, st ClaimStatus, blocker string, err error)

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
}

// on is the driver with its clients on another store (a round's own
// replicated Redis).
func (d *linDriver) on(s *Store) *linDriver {
	c := *d
	c.store = s
	return &c
}

// linClientOptions are the options of a client that neither retries nor
// waits for a server to come back: a request that meets a restarting or
// killed Redis fails at once, so histories hold operations whose outcome is
// unknown (and no request runs twice, once on each side of a failover).
func linClientOptions() *redis.Options {
	return &redis.Options{MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: 5 * time.Millisecond}
}

// linStore is storeOn with a linClientOptions client.
func linStore(t *testing.T, o *redis.Options) *Store {
	t.Helper()
	c := redis.NewClient(o)
	c.AddHook(&slotHook{t: t})
	t.Cleanup(func() { c.Close() })
	s := NewStore(c)
	if err := s.Load(context.Background()); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	return s
}

// linStoreOn is linStore on the Redis at addr.
func linStoreOn(t *testing.T, addr string) *Store {
	t.Helper()
	o := linClientOptions()
	o.Addr = addr
	return linStore(t, o)
}

func keeperClaim(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, string, error) {
	l, res, err := k.Claim(ctx, session, attemptID, "codex")
	if err != nil || l == nil {
		return nil, res.Status, res.Blocker, err
	}
	return l, res.Status, "", nil
}

func realLinDriver(s *Store) *linDriver {
	return &linDriver{store: s, claim: keeperClaim, renew: renewScript}
}

// claimWithScript runs another claim script with the claim script's
// documented keys and arguments, for the broken variants (and for tests
// that claim without a Keeper's lease).
func claimWithScript(script *redis.Script) func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, error) {
	claim := scriptClaim(script)
	return func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, error) {
		l, st, _, err := claim(ctx, k, session, attemptID)
		return l, st, err
	}
}

// scriptClaim is claimWithScript for the driver: it also returns the
// blocker a busy claim names.
func scriptClaim(script *redis.Script) linClaimFunc {
	return func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, string, error) {
		keys := keysFor(session)
		res, err := script.Run(ctx, k.store.rdb,
			[]string{keys.order(), keys.attempt(attemptID), keys.lease(), keys.fence(), keys.session(), keys.node()},
			attemptID, k.holder, k.ttl.Milliseconds(), newEpoch(), SeqReservation, keys.prefix(), FinishedTTL.Milliseconds(),
			newEpoch(), 0, "codex", // a claim token; no quarantine; the harness
		).StringSlice()
		if err != nil {
			return nil, "", "", err
		}
		switch ClaimStatus(res[0]) {
		case Claimed:
			return &scriptHold{store: k.store, keys: keys, holder: k.holder, attemptID: attemptID, fence: res[1]}, Claimed, "", nil
		case ClaimBusy:
			if len(res) > 1 {
				return nil, ClaimBusy, res[1], nil
			}
		}
		return nil, ClaimStatus(res[0]), "", nil
	}
}

// scriptHold finishes and abandons through the scripts, as Lease.Finish and
// Lease.Abandon do.
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

func (h *scriptHold) Abandon(ctx context.Context, code string, result []byte) (FinishStatus, error) {
	st, err := abandonScript.Run(ctx, h.store.rdb,
		[]string{h.keys.order(), h.keys.attempt(h.attemptID), h.keys.lease()},
		h.attemptID, h.fence, code, result, FinishedTTL.Milliseconds(), h.holder).Text()
	return FinishStatus(st), err
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

// round records one history: linClients clients doing opsPerClient
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
	keepers := make([]*Keeper, linClients)
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
	total := int64(linClients * opsPerClient)
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
