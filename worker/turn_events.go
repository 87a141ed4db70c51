package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/teamster-fleet/teamster/bus"
)

// errRunEnded says an event came after the run's result.
var errRunEnded = errors.New("the run has ended")

// eventStream is a run's events to its replyTo: the seq numbers used, the
// extension of their reservation in progress, and whether the stream is
// closed (the result event, or none, was its last). Its lock serialises the
// events, so seq numbers reach the wire in order.
type eventStream struct {
	mu     sync.Mutex
	seq    int64
	closed bool
	// reserving is closed when an emitter's extension of the seq
	// reservation, made outside mu, is done.
	reserving chan struct{}
}

// emit sends one event with the next seq. Seq numbers are gap-free: a seq is
// used only once the lease has it reserved, and events are serialised so they
// reach the wire in seq order. Extending the reservation (a fenced round trip
// every SeqReservation events, when renewals have not kept ahead) happens
// outside the stream's lock, on a context of its own: the run's context may
// have ended (a cancel, the deadline) while the harness still reports what
// it did, and those events must go out too.
func (r *run) emit(eventType string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	es := &r.events
	es.mu.Lock()
	for {
		if es.closed {
			es.mu.Unlock()
			return errRunEnded
		}
		seq := es.seq + 1
		if r.lease.Reserved(seq) {
			_ = r.lease.NoteSeq(r.ctx, seq) // reserved: no round trip
			es.seq = seq
			err := r.publishEvent(seq, eventType, b)
			es.mu.Unlock()
			if err != nil {
				r.log().Debug("event not sent: " + err.Error())
			}
			return nil
		}
		if wait := es.reserving; wait != nil {
			// Another emitter is extending the reservation.
			es.mu.Unlock()
			<-wait
			es.mu.Lock()
			continue
		}
		done := make(chan struct{})
		es.reserving = done
		es.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.w.cfg.LeaseTTL())
		err := r.lease.NoteSeq(ctx, seq)
		cancel()
		es.mu.Lock()
		es.reserving = nil
		close(done)
		if err != nil {
			es.mu.Unlock()
			return err
		}
	}
}

// nextSeq is the seq the next event would get: the fenced finish reserves
// it for the result event while the lease is still held.
func (r *run) nextSeq() int64 {
	r.events.mu.Lock()
	defer r.events.mu.Unlock()
	return r.events.seq + 1
}

// closeEvents closes the run's event stream, once: it drops the run's
// subjects first (the UNSUBs reach the server before the result event, so a
// cancel or inject sent by someone who saw the result finds no run,
// no_active_run, instead of a subscription about to go), then sends result
// as the last event when it is not nil. It reports whether it sent it.
func (r *run) closeEvents(result []byte) bool {
	es := &r.events
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.closed {
		return false
	}
	es.closed = true
	r.unsubscribe()
	if result == nil {
		return false
	}
	es.seq++
	return r.publishEvent(es.seq, bus.EventResult, result) == nil
}

// publishEvent sends an event to replyTo; the stream's lock is held.
func (r *run) publishEvent(seq int64, eventType string, data []byte) error {
	if r.attempt.ReplyTo == "" {
		return nil
	}
	return bus.SendEvent(r.w.nc, r.attempt.ReplyTo, &bus.Event{V: bus.Version, AttemptID: r.attempt.AttemptID,
		Seq: seq, Type: eventType, Data: data})
}
