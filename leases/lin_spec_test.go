package leases

import (
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// The lease model's sequential specification (spec, step) and its porcupine model.

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
