package leases

import (
	"slices"
	"strconv"
	"strings"
	"time"
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
