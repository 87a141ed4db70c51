package worker

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/leases"
)

// run is one claimed attempt on this worker, from its claim to its
// retirement. Its fields are grouped by the phase that owns them; the others
// only read them.
type run struct {
	// Set by the claim (claim.go), read by every phase.
	w         *Worker
	attempt   *bus.Attempt
	harnessID string
	h         *hosted
	lease     *leases.Lease
	delegate  string
	started   time.Time
	// session is the session record the claim read under the lease; the
	// checks under the lease (prepare.go) read it.
	session *teamster.SessionRecord

	// ctx ends with the run's cause: the lease lost (the keeper's OnLost),
	// a cancel request, the drain timeout or a Stop, a Kill. Retirement
	// cancels it with no cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// step is where the run is (advance).
	step atomic.Int32

	subs   runSubjects                 // run.go: teamster.worker.<workerId>.run.<attemptId>.inject and .cancel
	media  atomic.Pointer[mediaReader] // turn_media.go: the workspace while the host stages reply media
	events eventStream                 // turn_events.go: seq, reservation, the result event
	usage  usageTotal                  // turn_host.go: output tokens reported
	inj    injections                  // turn_inject.go: injected items in flight
}

// runStep is where a run is. It only moves forward (advance); each step is
// a phase's, in the order they happen.
type runStep int32

const (
	stepPrepare runStep = iota // claimed; the checks under the lease (prepare.go)
	stepTurn                   // the harness runs (turn.go)
	stepFinish                 // the outcome is decided and being recorded (finish.go): nothing to cancel
	stepDeliver                // recorded; being delivered (deliver.go)
	stepRetired                // left the worker: no subjects, no slot
)

// advance moves the run forward to step to; it reports false, changing
// nothing, when the run is at to or beyond already.
func (r *run) advance(to runStep) bool {
	for {
		cur := r.step.Load()
		if runStep(cur) >= to {
			return false
		}
		if r.step.CompareAndSwap(cur, int32(to)) {
			return true
		}
	}
}

func (r *run) at() runStep { return runStep(r.step.Load()) }

func (w *Worker) newRun(a *bus.Attempt, harnessID string, h *hosted, l *leases.Lease, delegate string) *run {
	ctx, cancel := context.WithCancelCause(w.runCtx)
	r := &run{w: w, attempt: a, harnessID: harnessID, h: h, lease: l, delegate: delegate, started: time.Now(),
		ctx: ctx, cancel: cancel, inj: injections{ready: make(chan struct{})}}
	w.runs.add(r)
	return r
}

// log is the run's logger. Its fields are attached when something is
// logged, not held by the run: a running turn does not keep a map of log
// fields (about 0.4 KiB live per turn).
func (r *run) log() logrus.FieldLogger {
	return r.w.attemptLog(r.attempt, r.harnessID).WithField("fence", r.lease.Fence())
}

// execute runs the phases after the claim. It owns one slot. The checks
// under the lease run on the caller's goroutine (the claim's, which ends
// here); the turn gets a goroutine of its own whose first frame is small: a
// turn that sleeps in its harness holds the run's stack for as long as it
// runs, and Go's runtime halves a sleeping goroutine's stack at a garbage
// collection only when under a quarter of it is in use (make bench, memory:
// 8 KiB of stack in use per sleeping turn before, 4-5.5 KiB after). The
// finish and the delivery run on whichever goroutine finishes the run
// first: the turn's, or its grace watchdog's.
func (r *run) execute() {
	binding, ok := r.prepare()
	if !ok {
		r.retire()
		return
	}
	go r.turn(binding)
}

// retire releases what the run held once its result is out (or given up):
// its subjects, its context, its place among the worker's runs, its slot.
func (r *run) retire() {
	r.advance(stepRetired)
	r.unsubscribe()
	r.cancel(nil)
	r.w.runs.remove(r)
	r.w.releaseSlot()
}

// runSubjects are a run's subscriptions to teamster.worker.<workerId>.run.<attemptId>.inject
// and .cancel.
type runSubjects struct {
	mu   sync.Mutex
	subs []*nats.Subscription
}

// subscribe serves the run's subjects
// (teamster.worker.<workerId>.run.<attemptId>.inject and .cancel, where the
// routers relay the gateways' requests) while it runs, delivering into the worker's one run-message
// channel (no goroutine per subscription); dispatchRunMsgs routes the
// messages to the run. Two literal subjects rather than one wildcard: the
// server updates its subject cache for a literal subscription in one step,
// for a wildcard by scanning the whole cache (measured at 1,024 sessions in
// flight: 9% of the fleet's CPU went to that scan on SUB and UNSUB).
func (r *run) subscribe() error {
	inject, err := bus.WorkerRunSubject(r.w.cfg.WorkerID, r.attempt.ScopedID(), "inject")
	if err != nil {
		return err
	}
	cancel, _ := bus.WorkerRunSubject(r.w.cfg.WorkerID, r.attempt.ScopedID(), "cancel")
	r.subs.mu.Lock()
	defer r.subs.mu.Unlock()
	for _, subj := range []string{inject, cancel} {
		sub, err := r.w.nc.ChanSubscribe(subj, r.w.runs.msgs)
		if err != nil {
			r.subs.dropLocked()
			return err
		}
		r.subs.subs = append(r.subs.subs, sub)
	}
	return nil
}

// unsubscribe drops the run's subscriptions.
func (r *run) unsubscribe() {
	r.subs.mu.Lock()
	defer r.subs.mu.Unlock()
	r.subs.dropLocked()
}

func (s *runSubjects) dropLocked() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.subs = nil
}

// dispatchRunMsgs routes the messages of every run's subjects to their run:
// a cancel is handled at once, an inject in its own goroutine (it may wait
// for the harness's handle and check a source in Redis).
func (w *Worker) dispatchRunMsgs() {
	for {
		var m *nats.Msg
		select {
		case m = <-w.runs.msgs:
		case <-w.life.done:
			return
		}
		subject, tenant := m.Subject, ""
		if strings.Count(subject, ".") > strings.Count(w.runPrefix, ".")+1 {
			// A gateway's run: <prefix><id>.<op>.gateway.<gatewayId>.
			var err error
			if subject, tenant, err = bus.SplitIdentified(subject); err != nil {
				continue
			}
		}
		rest, ok := strings.CutPrefix(subject, w.runPrefix)
		id, op, ok2 := strings.Cut(rest, ".")
		if !ok || !ok2 {
			continue
		}
		r := w.runs.get(teamster.Scope(tenant, id))
		switch {
		case r == nil && op == "inject":
			respond(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: id,
				Error: teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running here", id)})
		case r == nil:
			respond(m, bus.Rejected(teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running here", id)))
		case op == "cancel":
			r.onCancel(m)
		case op == "read":
			go r.onRead(m)
		default: // inject: a run subscribes only its .cancel, .inject and, while it stages reply media, .read
			go r.onInject(m)
		}
	}
}

func (r *run) onCancel(m *nats.Msg) {
	if r.at() >= stepFinish {
		// The outcome is decided (being recorded, or already sent): there is
		// nothing left to cancel.
		respond(m, bus.Rejected(teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s has ended", r.attempt.AttemptID)))
		return
	}
	var req bus.CancelRequest
	if err := bus.Decode(m.Data, &req); err != nil {
		respond(m, bus.Rejected(err))
		return
	}
	reason := req.Reason
	if reason == "" {
		reason = "cancelled by request"
	}
	r.log().WithField("reason", reason).Info("cancel requested")
	r.cancel(teamster.Errorf(teamster.CodeCancelled, "%s", reason))
	respond(m, bus.OK())
}

func respond(m *nats.Msg, v any) {
	if b, err := bus.Encode(v); err == nil {
		_ = m.Respond(b)
	}
}

// runSet is the worker's running runs, by attempt id, and the waiters for
// the moment none runs; msgs receives every run's cancel and inject
// requests (dispatchRunMsgs).
type runSet struct {
	msgs chan *nats.Msg

	mu     sync.Mutex
	byID   map[string]*run
	idlers []chan struct{}
}

func newRunSet() runSet {
	return runSet{msgs: make(chan *nats.Msg, 4096), byID: map[string]*run{}}
}

func (s *runSet) add(r *run) {
	s.mu.Lock()
	s.byID[r.attempt.ScopedID()] = r
	s.mu.Unlock()
}

// remove unregisters r and wakes the idle waiters when it was the last.
func (s *runSet) remove(r *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, r.attempt.ScopedID())
	if len(s.byID) == 0 {
		for _, ch := range s.idlers {
			close(ch)
		}
		s.idlers = nil
	}
}

func (s *runSet) get(id string) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

func (s *runSet) all() []*run {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := make([]*run, 0, len(s.byID))
	for _, r := range s.byID {
		runs = append(runs, r)
	}
	return runs
}

// ids are the ids of the attempts running now, as people read them
// (teamster.ScopedDisplay: <gatewayId>/<attemptId> for a gateway's).
func (s *runSet) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.byID))
	for id := range s.byID {
		ids = append(ids, teamster.ScopedDisplay(id))
	}
	return ids
}

func (s *runSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// idle returns a channel closed once no attempt is running.
func (s *runSet) idle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if len(s.byID) == 0 {
		close(ch)
		return ch
	}
	s.idlers = append(s.idlers, ch)
	return ch
}
