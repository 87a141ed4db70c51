package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/injection"
	"github.com/teamster-fleet/teamster/selection"
)

// The turn's injection (docs/PROTOCOL.md, "Injection"). A run serves
// teamster.worker.<workerId>.run.<attemptId>.inject while it runs (the
// routers relay teamster.inject and teamster.run.<attemptId>.inject to it).
// Each request becomes one
// item: the worker checks what it can before touching the harness
// (source-bound input to a V1-only harness, a run that ended, a lease that is
// no longer current), then builds the item's assertion and hands the text to
// the harness's handle, which calls the assertion immediately before it
// dispatches. The item's admission and its one settlement are reported as
// injection events on the attempt's replyTo. In this package "settle" means
// only that: an injected item's one final state.

// injectorWait bounds how long an inject waits for a run that has just been
// claimed to install its injection handle.
const injectorWait = 2 * time.Second

// sourceCheckTimeout bounds one Redis check of a source's authority.
const sourceCheckTimeout = 2 * time.Second

// hostAssertTimeout bounds one assertCurrent host callback: no answer in
// time is a false assertion (fail closed).
const hostAssertTimeout = 2 * time.Second

// item is one injection in flight on a run.
type item struct {
	id    string
	latch *injection.Latch
	// bound says the item is source-bound; sourceID names its Redis source
	// authority, when it has one (it may have only the host's assertion).
	bound    bool
	sourceID string

	mu       sync.Mutex
	accepted bool
	settled  bool
}

// injections tracks a run's items: their settlements, and the latches of
// source-bound items so that a revoke broadcast drops them at once.
type injections struct {
	mu    sync.Mutex
	items map[string]*item
	ready chan struct{} // closed when the harness installed its handle
	once  sync.Once
	h     any
}

func (r *run) injector() any {
	r.inj.mu.Lock()
	defer r.inj.mu.Unlock()
	return r.inj.h
}

// setInjector records the harness's handle (harness.Run.OnInjector).
func (r *run) setInjector(h any) {
	r.inj.mu.Lock()
	r.inj.h = h
	r.inj.mu.Unlock()
	if h != nil {
		r.inj.once.Do(func() { close(r.inj.ready) })
	}
}

// onInject serves teamster.worker.<workerId>.run.<attemptId>.inject.
func (r *run) onInject(m *nats.Msg) {
	var req bus.InjectRequest
	if err := bus.Decode(m.Data, &req); err != nil {
		respond(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: r.attempt.AttemptID, Error: teamster.AsError(err)})
		return
	}
	if req.AttemptID != "" && req.AttemptID != r.attempt.AttemptID {
		respond(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: r.attempt.AttemptID,
			Error: teamster.Errorf(teamster.CodeInvalidRequest, "attemptId does not name this run")})
		return
	}
	respond(m, r.inject(&req))
}

// inject admits one item, or refuses it with a code.
func (r *run) inject(req *bus.InjectRequest) *bus.InjectReply {
	id := "inj-" + ulid.Make().String()
	log := r.log().WithFields(logrus.Fields{"injection": id, "kind": req.AuthorityKind})
	refuse := func(e *teamster.Error) *bus.InjectReply {
		r.w.m.Injections.WithLabelValues(string(e.Code)).Inc()
		log.WithField("code", e.Code).Info("injection refused")
		_ = r.emit(bus.EventInjection, bus.InjectionData{InjectionID: id, State: bus.InjectionRejected, Code: e.Code})
		return &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, InjectionID: id, AttemptID: r.attempt.AttemptID, Error: e}
	}
	kind := injection.Kind(req.AuthorityKind)
	level := r.h.impl.Manifest().InjectionLevel()
	switch {
	case kind == injection.KindSourceBound && level != selection.InjectionV2:
		// Before any queue or I/O: source-bound input never falls back to
		// an unchecked V1 queue.
		return refuse(teamster.Errorf(teamster.CodeInjectionRequiresV2, "harness %s accepts no source-bound input (injection %s)", r.harnessID, level))
	case level == selection.InjectionNone:
		return refuse(teamster.Errorf(teamster.CodeInvalidRequest, "harness %s accepts no injection", r.harnessID))
	case r.finalization():
		return refuse(teamster.Errorf(teamster.CodeInvalidRequest, "a settled-turn finalization takes no steering"))
	case r.ctx.Err() != nil:
		return refuse(teamster.Errorf(teamster.CodeNoActiveRun, "the run has ended"))
	case !r.lease.Current():
		return refuse(teamster.Errorf(teamster.CodeLeaseLost, "the run's lease is no longer held"))
	case req.HostAssertion != "" && r.attempt.HostID == "":
		return refuse(teamster.Errorf(teamster.CodeInvalidRequest, "a host assertion needs a host: the attempt has no hostId"))
	}
	select {
	case <-r.inj.ready:
	case <-r.ctx.Done():
		return refuse(teamster.Errorf(teamster.CodeNoActiveRun, "the run has ended"))
	case <-time.After(injectorWait):
		return refuse(teamster.Errorf(teamster.CodeNoActiveRun, "the run has not installed its injection handle"))
	}
	it := &item{id: id, bound: kind == injection.KindSourceBound}
	if req.Source != nil {
		// The source is the run's tenant's (its namespace), whoever
		// relayed the request.
		it.sourceID = teamster.Scope(r.attempt.Tenant, req.Source.ID)
	}
	it.latch = injection.NewLatch(r.assertion(kind, req))
	r.track(it)
	opts := injection.QueueOptions{
		Images:     req.Images,
		DebounceMs: req.DebounceMs,
		OnQueueAccepted: func(ok bool) {
			if ok {
				r.admit(it)
			}
		},
		OnQueueSettled: func(s injection.Settlement) { r.settle(it, s, "") },
	}
	var err error
	switch h := r.injector().(type) {
	case injection.V2:
		err = h.QueueMessage(req.Text, opts, it.latch.Assert(), kind)
	case injection.V1:
		// Only run input reaches a V1 handle; the worker's latch is still
		// checked once, at admission.
		if !it.latch.Current() {
			err = teamster.Errorf(teamster.CodeLeaseLost, "the run's lease is no longer held")
		} else {
			err = h.QueueMessage(req.Text, opts)
		}
	default:
		err = teamster.Errorf(teamster.CodeNoActiveRun, "the run's handle accepts no injection")
	}
	if err != nil {
		e := teamster.AsError(err)
		if e.Code == teamster.CodeInternal {
			e = teamster.Errorf(teamster.CodeNoActiveRun, "%s", e.Message)
		}
		// A handle that refused it may have settled it already; then this
		// changes nothing.
		r.settle(it, injection.Rejected, e.Code)
		r.w.m.Injections.WithLabelValues(string(e.Code)).Inc()
		return &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, InjectionID: id, AttemptID: r.attempt.AttemptID, Error: e}
	}
	return &bus.InjectReply{V: bus.Version, Status: bus.StatusAccepted, InjectionID: id, AttemptID: r.attempt.AttemptID}
}

// assertion is the worker-built check of one item: the run is live, its
// lease current and unchanged, and for source-bound input the source's
// authority in Redis still has the generation the request carried (source)
// and the submitter's own assertion still holds (hostAssertion, asked of the
// attempt's host). The latch around it keeps it false once it has been false.
func (r *run) assertion(kind injection.Kind, req *bus.InjectRequest) func() bool {
	src, hostAssertion := req.Source, req.HostAssertion
	return func() bool {
		if r.ctx.Err() != nil || !r.lease.Current() {
			return false
		}
		if kind != injection.KindSourceBound {
			return true
		}
		if src != nil {
			ctx, cancel := context.WithTimeout(r.ctx, sourceCheckTimeout)
			ok, err := r.w.store.SourceCurrent(ctx, teamster.Scope(r.attempt.Tenant, src.ID), src.Generation)
			cancel()
			if err != nil || !ok {
				return false
			}
		}
		return hostAssertion == "" || r.hostAsserts(hostAssertion)
	}
}

// hostAsserts asks the attempt's host whether its assertion still holds:
// only an answer of ok and current within hostAssertTimeout is true.
func (r *run) hostAsserts(assertion string) bool {
	ctx, cancel := context.WithTimeout(r.ctx, hostAssertTimeout)
	defer cancel()
	var rep bus.AssertCurrentReply
	err := (*host)(r).call(ctx, bus.HostCallAssertCurrent, &bus.AssertCurrent{V: bus.Version, Assertion: assertion}, &rep)
	if err != nil {
		r.log().WithField("assertion", assertion).Info("the host's assertion got no answer; it is false: " + err.Error())
		return false
	}
	return rep.Status == bus.StatusOK && rep.Current
}

func (r *run) track(it *item) {
	r.inj.mu.Lock()
	if r.inj.items == nil {
		r.inj.items = map[string]*item{}
	}
	r.inj.items[it.id] = it
	r.inj.mu.Unlock()
	if it.sourceID != "" {
		r.w.sources.add(it.sourceID, it.latch)
	}
}

// admit reports an item's admission (once).
func (r *run) admit(it *item) {
	it.mu.Lock()
	if it.accepted || it.settled {
		it.mu.Unlock()
		return
	}
	it.accepted = true
	it.mu.Unlock()
	r.w.m.Injections.WithLabelValues(bus.InjectionAccepted).Inc()
	_ = r.emit(bus.EventInjection, bus.InjectionData{InjectionID: it.id, State: bus.InjectionAccepted})
}

// settle reports an item's settlement once and stops tracking it; it
// reports whether this call was the one.
func (r *run) settle(it *item, s injection.Settlement, code teamster.Code) bool {
	it.mu.Lock()
	if it.settled {
		it.mu.Unlock()
		return false
	}
	it.settled = true
	it.mu.Unlock()
	r.inj.mu.Lock()
	delete(r.inj.items, it.id)
	r.inj.mu.Unlock()
	if it.sourceID != "" {
		r.w.sources.remove(it.sourceID, it.latch)
	}
	state := s.EventState() // unconfirmed reads "accepted": admitted, not known to be committed
	if s == injection.Rejected {
		if code == "" && !it.latch.Current() {
			code = teamster.CodeSourceRevoked
			if !it.bound {
				code = teamster.CodeLeaseLost
			}
		}
	}
	r.w.m.Injections.WithLabelValues(string(s)).Inc()
	_ = r.emit(bus.EventInjection, bus.InjectionData{InjectionID: it.id, State: state, Code: code})
	return true
}

// settleLeftovers settles, as cancelled, every item the harness left
// unsettled when its run ended, so the sender hears of each before the
// result.
func (r *run) settleLeftovers() {
	r.inj.mu.Lock()
	left := make([]*item, 0, len(r.inj.items))
	for _, it := range r.inj.items {
		left = append(left, it)
	}
	r.inj.mu.Unlock()
	for _, it := range left {
		r.settle(it, injection.Cancelled, "")
	}
}

// sourceLatches holds the latches of the source-bound items in flight on a
// worker, so that a revoke broadcast revokes them at once (their assertion
// would also fail on its next Redis check).
type sourceLatches struct {
	mu sync.Mutex
	m  map[string]map[*injection.Latch]struct{}
}

func (s *sourceLatches) add(id string, l *injection.Latch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]map[*injection.Latch]struct{}{}
	}
	if s.m[id] == nil {
		s.m[id] = map[*injection.Latch]struct{}{}
	}
	s.m[id][l] = struct{}{}
}

func (s *sourceLatches) remove(id string, l *injection.Latch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m[id], l)
	if len(s.m[id]) == 0 {
		delete(s.m, id)
	}
}

// revoke revokes every latch of source id.
func (s *sourceLatches) revoke(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.m[id] {
		l.Revoke()
	}
	return len(s.m[id])
}

// onSourceRevoked serves the revoke broadcast.
func (w *Worker) onSourceRevoked(m *nats.Msg) {
	var rv bus.SourceRevoked
	if err := bus.Decode(m.Data, &rv); err != nil {
		return
	}
	if n := w.sources.revoke(rv.Scoped()); n > 0 {
		w.log.WithFields(logrus.Fields{"source": rv.ID, "tenant": rv.Tenant, "items": n}).Info("source revoked: in-flight items dropped")
	}
}
