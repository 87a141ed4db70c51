package scripted

import (
	"sync"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/injection"
)

// queue holds a run's injected input until an awaitInjection step takes it.
// Its handles are called from other goroutines (the worker's inject
// subscription); the run takes items and ends the queue.
//
// Every admitted item is settled exactly once, by whoever removes it from the
// queue under mu: the run (committed, or rejected when its assertion fell
// before dispatch) or end (cancelled). Input refused at admission is settled
// rejected by QueueMessage itself.
type queue struct {
	mu     sync.Mutex
	items  []*item
	ended  bool
	notify chan struct{} // capacity 1: "something was queued"
}

// item is one admitted input.
type item struct {
	text string
	opts injection.QueueOptions
	// assert is the V2 assertion, called again before dispatch; nil for V1.
	assert injection.AssertFunc
	// admitted is closed once OnQueueAccepted has returned, so that an
	// item's settlement never overtakes its admission.
	admitted chan struct{}
}

func newQueue() *queue { return &queue{notify: make(chan struct{}, 1)} }

// add admits one input. check is the V2 assertion (nil for V1 input); it is
// called after the cheap checks and immediately before the queue is mutated.
// refused is the error for input whose assertion is false.
func (q *queue) add(text string, opts injection.QueueOptions, check injection.AssertFunc, refused *teamster.Error) error {
	if q.isEnded() {
		settle(opts, injection.Rejected)
		return noActiveRun()
	}
	if check != nil && !check() {
		settle(opts, injection.Rejected)
		return refused
	}
	it := &item{text: text, opts: opts, assert: check, admitted: make(chan struct{})}
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		settle(opts, injection.Rejected)
		return noActiveRun()
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	it.accept()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return nil
}

// accept reports admission, then releases the item's settlement.
func (it *item) accept() {
	defer close(it.admitted)
	if it.opts.OnQueueAccepted != nil {
		it.opts.OnQueueAccepted(true)
	}
}

// settle reports the item's one settlement, after its admission.
func (it *item) settle(s injection.Settlement) {
	<-it.admitted
	settle(it.opts, s)
}

// settle calls opts.OnQueueSettled when set.
func settle(opts injection.QueueOptions, s injection.Settlement) {
	if opts.OnQueueSettled != nil {
		opts.OnQueueSettled(s)
	}
}

func (q *queue) isEnded() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ended
}

// take removes and returns every queued item.
func (q *queue) take() []*item {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// end refuses all further input and settles every item still queued as
// cancelled. It is called once, when the run returns.
func (q *queue) end() {
	q.mu.Lock()
	q.ended = true
	items := q.items
	q.items = nil
	q.mu.Unlock()
	for _, it := range items {
		it.settle(injection.Cancelled)
	}
}

func noActiveRun() *teamster.Error {
	return teamster.Errorf(teamster.CodeNoActiveRun, "scripted: the run has ended")
}

// v2Handle is the injection.V2 handle of a run whose manifest says "v2".
type v2Handle struct{ q *queue }

var _ injection.V2 = v2Handle{}

// QueueMessage queues text for the run's next awaitInjection step. The
// assertion is called immediately before the queue is mutated and again
// before the item is dispatched; when it is false the input is settled
// rejected and refused with source_revoked (source-bound input) or
// no_active_run (run input). A missing assertion counts as false.
func (h v2Handle) QueueMessage(text string, opts injection.QueueOptions, assertCurrent injection.AssertFunc, kind injection.Kind) error {
	refused, invalid := kind.Refusal("scripted")
	if invalid != nil {
		injection.Refuse(opts)
		return invalid
	}
	if assertCurrent == nil {
		assertCurrent = func() bool { return false }
	}
	return h.q.add(text, opts, assertCurrent, refused)
}

// v1Handle is the injection.V1 handle of a run whose manifest says "v1". It
// takes ordinary input only; refusing source-bound input is the worker's job.
type v1Handle struct{ q *queue }

var _ injection.V1 = v1Handle{}

// QueueMessage queues text for the run's next awaitInjection step.
func (h v1Handle) QueueMessage(text string, opts injection.QueueOptions) error {
	return h.q.add(text, opts, nil, nil)
}
