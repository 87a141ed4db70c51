package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster/bus"
)

// eventBuffer is how many events a Handle buffers for a slow reader; events
// beyond it are dropped (the result never is).
const eventBuffer = 1024

// resultPoll is how often Result also looks for the durable result, in case
// the result event was lost.
const resultPoll = 3 * time.Second

// Handle follows one submitted attempt until its result arrives (by event,
// or found in the durable stream by Result), Close, the client's Close, or
// the end of the time the attempt's events can come in (its deadlines plus a
// slack; see follow). A caller that forgets Close leaks nothing for longer.
type Handle struct {
	// Reply is the router's answer: accepted (with the selection record) or
	// fallback.
	Reply *bus.SubmitReply

	c      *Client
	id     string      // the attempt's id, known before the reply
	route  route       // set by follow
	expiry *time.Timer // ends the following when the attempt can send nothing more
	stop   sync.Once

	mu sync.Mutex
	// finished says the handle follows no more: its result arrived, or it
	// was abandoned by the client's Close. Events after it are ignored.
	finished bool
	// res is the result; arrived is closed once it is set.
	res     *bus.Result
	arrived chan struct{}
	// events is made by the first call of Events; until then the events are
	// kept in pending (a submitter that only waits for the result never
	// pays for a 1,024-event channel: 72 KiB per attempt).
	events  chan bus.Event
	pending []bus.Event
	dropped int
}

// AttemptID is the attempt's id (assigned by the router when the submitter
// gave none).
func (h *Handle) AttemptID() string { return h.Reply.AttemptID }

// Events delivers the attempt's events in order, the result event last; the
// channel is closed after the result event. A reader that falls more than
// 1,024 events behind loses events (Dropped counts them), never the result.
// It also closes, without a result event, when Result found the result in
// the durable stream (the event was lost), when the client closed, and when
// the attempt's events can no longer come (see Handle).
func (h *Handle) Events() <-chan bus.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.events == nil {
		h.events = make(chan bus.Event, eventBuffer)
		for _, e := range h.pending {
			h.events <- e // at most eventBuffer: never blocks
		}
		h.pending = nil
		if h.finished {
			close(h.events)
		}
	}
	return h.events
}

// Dropped is the number of events dropped for a slow reader.
func (h *Handle) Dropped() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dropped
}

// Result waits for the attempt's terminal result: the result event, or, when
// that event was lost (a disconnect, a dropped subscription), the durable
// result, which it checks every few seconds. It returns ErrClientClosed at
// once when the client is closed meanwhile (Client.Result still reads the
// durable result).
func (h *Handle) Result(ctx context.Context) (*bus.Result, error) {
	if h.Reply == nil || h.Reply.Status != bus.StatusAccepted {
		return nil, errors.New("the attempt was not accepted")
	}
	t := time.NewTicker(resultPoll)
	defer t.Stop()
	for {
		select {
		case <-h.arrived:
			return h.res, nil
		case <-t.C:
			if r, err := h.c.Result(ctx, h.AttemptID()); err == nil {
				return h.settle(r), nil
			}
		case <-h.c.done:
			select {
			case <-h.arrived:
				return h.res, nil
			default:
				return nil, ErrClientClosed
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops following the attempt. The attempt itself goes on. A handle
// stops being followed by itself when its result arrives, and at the latest
// when the attempt can send nothing more, so Close is not needed to free
// anything for long; it stops the following at once.
func (h *Handle) Close() {
	h.mu.Lock()
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.mu.Unlock()
	h.unfollow()
}

// unfollow ends h's route, once. h.mu may be held.
func (h *Handle) unfollow() {
	h.stop.Do(h.route.end)
}

// onEvent takes one message on the attempt's reply subject.
func (h *Handle) onEvent(m *nats.Msg) {
	var e bus.Event
	if err := bus.Decode(m.Data, &e); err != nil {
		return
	}
	var r *bus.Result
	if e.Type == bus.EventResult {
		r = new(bus.Result)
		if err := bus.Decode(e.Data, r); err != nil {
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished || (h.Reply != nil && e.AttemptID != h.Reply.AttemptID) {
		// Events after the result are ignored (docs/PROTOCOL.md).
		return
	}
	if r != nil {
		h.finishLocked(r)
	}
	switch {
	case h.events == nil && len(h.pending) < eventBuffer:
		h.pending = append(h.pending, e)
	case h.events == nil:
		h.dropped++
	default:
		select {
		case h.events <- e:
		default:
			h.dropped++
		}
	}
	if h.finished && h.events != nil {
		close(h.events)
	}
}

// finishLocked records the result (r; nil when the client closed) and stops
// following: the route ends before the result is handed over, so whoever
// sees the result also sees that the client no longer routes the attempt.
// The caller closes the events channel, after its last event.
func (h *Handle) finishLocked(r *bus.Result) {
	h.finished = true
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.unfollow()
	if r != nil {
		h.res = r
		close(h.arrived)
	}
}

// settle is the result found in the durable stream (its event was lost, or
// is late): the handle stops following, and its Events channel closes
// without a result event. It returns the handle's result: r, or the result
// event's when that came first.
func (h *Handle) settle(r *bus.Result) *bus.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.res != nil {
		return h.res
	}
	if !h.finished {
		h.finishLocked(r)
		if h.events != nil {
			close(h.events)
		}
	}
	return r
}

// abandon stops following because the client closed, or because the
// attempt can send nothing more: the Events channel closes without a result
// event (Result still finds the durable result, unless the client closed).
func (h *Handle) abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return
	}
	h.finishLocked(nil)
	if h.events != nil {
		close(h.events)
	}
}
