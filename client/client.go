// Package client is the Go API of teamster for gateways and delegates:
// Submit an attempt and follow its events and its one terminal result, read a
// result from the durable stream, cancel a running attempt.
package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Client talks to a teamster fleet over one NATS connection, which the caller
// owns.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream

	// Events of attempts whose reply subject the client chose arrive on one
	// wildcard subscription, <inbox>.*, and are routed to their handle by
	// the last token: no subscription per attempt.
	inbox   string
	muxOnce sync.Once
	muxErr  error
	muxMu   sync.Mutex
	handles map[string]*Handle
	nextTok atomic.Uint64
}

// New returns a client on nc.
func New(nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, js: js, inbox: nc.NewInbox(), handles: map[string]*Handle{}}, nil
}

// follow registers h under a fresh reply subject of the client's events
// subscription, which it starts on first use.
func (c *Client) follow(h *Handle) (string, error) {
	c.muxOnce.Do(func() {
		sub, err := c.nc.Subscribe(c.inbox+".*", c.route)
		if err == nil {
			_ = sub.SetPendingLimits(-1, -1)
		}
		c.muxErr = err
	})
	if c.muxErr != nil {
		return "", fmt.Errorf("subscribe %s.*: %w", c.inbox, c.muxErr)
	}
	tok := strconv.FormatUint(c.nextTok.Add(1), 36)
	c.muxMu.Lock()
	c.handles[tok] = h
	c.muxMu.Unlock()
	h.unfollow = func() {
		c.muxMu.Lock()
		delete(c.handles, tok)
		c.muxMu.Unlock()
	}
	return c.inbox + "." + tok, nil
}

// route hands an event on the events subscription to its handle.
func (c *Client) route(m *nats.Msg) {
	tok := m.Subject[len(c.inbox)+1:]
	c.muxMu.Lock()
	h := c.handles[tok]
	c.muxMu.Unlock()
	if h != nil {
		h.onEvent(m)
	}
}

// Conn is the client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// ErrNoResult says an attempt has no durable result (yet, or any more: results
// are kept 24 hours).
var ErrNoResult = errors.New("no result for this attempt")

// eventBuffer is how many events a Handle buffers for a slow reader; events
// beyond it are dropped (the result never is).
const eventBuffer = 1024

// Handle follows one submitted attempt.
type Handle struct {
	// Reply is the router's answer: accepted (with the selection record),
	// fallback or rejected.
	Reply *bus.SubmitReply

	c        *Client
	sub      *nats.Subscription // when the attempt named its own reply subject
	unfollow func()             // when the client chose it
	result   chan *bus.Result
	mu       sync.Mutex
	// events is made by the first call of Events; until then the events are
	// kept in pending (a submitter that only waits for the result never
	// pays for a 1,024-event channel: 72 KiB per attempt).
	events  chan bus.Event
	pending []bus.Event
	done    bool
	dropped int
	closeMu sync.Once
}

// AttemptID is the attempt's id (assigned by the router when the submitter
// gave none).
func (h *Handle) AttemptID() string { return h.Reply.AttemptID }

// Submit submits a prepared attempt on teamster.submit and follows it. The
// reply subject is a fresh one under the client's own inbox (served by the
// client's one events subscription) unless the attempt names one. It returns the
// handle and, when the router rejected the attempt, the rejection as a
// *teamster.Error (the handle still carries the reply and its selection
// record). A fallback reply is not an error: the gateway runs the turn itself.
func (c *Client) Submit(ctx context.Context, a *bus.Attempt) (*Handle, error) {
	return c.submit(ctx, bus.SubjectSubmit, a)
}

func (c *Client) submit(ctx context.Context, subject string, a *bus.Attempt) (*Handle, error) {
	at := *a
	if at.V == 0 {
		at.V = bus.Version
	}
	h := &Handle{c: c, result: make(chan *bus.Result, 1)}
	if at.ReplyTo == "" {
		subj, err := c.follow(h)
		if err != nil {
			return nil, err
		}
		at.ReplyTo = subj
	} else {
		sub, err := c.nc.Subscribe(at.ReplyTo, h.onEvent)
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", at.ReplyTo, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		h.mu.Lock()
		h.sub = sub
		h.mu.Unlock()
	}
	var rep bus.SubmitReply
	if err := c.request(ctx, subject, nil, &at, &rep); err != nil {
		h.Close()
		return nil, err
	}
	h.mu.Lock()
	h.Reply = &rep
	h.mu.Unlock()
	if rep.Status != bus.StatusAccepted {
		h.Close()
		return h, rep.Err()
	}
	return h, nil
}

func (h *Handle) onEvent(m *nats.Msg) {
	var e bus.Event
	if err := bus.Decode(m.Data, &e); err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || (h.Reply != nil && e.AttemptID != h.Reply.AttemptID) {
		// Events after the result are ignored (DESIGN.md).
		return
	}
	if e.Type == bus.EventResult {
		var r bus.Result
		if err := bus.Decode(e.Data, &r); err != nil {
			return
		}
		h.done = true
		h.result <- &r
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
	if h.done && h.events != nil {
		close(h.events)
	}
}

// Events delivers the attempt's events in order, the result event last; the
// channel is closed after the result event. A reader that falls more than
// 1,024 events behind loses events (Dropped counts them), never the result.
func (h *Handle) Events() <-chan bus.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.events == nil {
		h.events = make(chan bus.Event, eventBuffer)
		for _, e := range h.pending {
			h.events <- e // at most eventBuffer: never blocks
		}
		h.pending = nil
		if h.done {
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
// result, which it checks every few seconds.
func (h *Handle) Result(ctx context.Context) (*bus.Result, error) {
	if h.Reply == nil || h.Reply.Status != bus.StatusAccepted {
		return nil, errors.New("the attempt was not accepted")
	}
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		select {
		case r := <-h.result:
			h.result <- r // keep it for later calls
			return r, nil
		case <-t.C:
			if r, err := h.c.Result(ctx, h.AttemptID()); err == nil {
				return r, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops following the attempt. The attempt itself goes on.
func (h *Handle) Close() {
	h.closeMu.Do(func() {
		h.mu.Lock()
		sub := h.sub
		h.mu.Unlock()
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		if h.unfollow != nil {
			h.unfollow()
		}
	})
}

// Result reads an attempt's durable result from TEAMSTER_RESULTS; ErrNoResult
// when there is none.
func (c *Client) Result(ctx context.Context, attemptID string) (*bus.Result, error) {
	r, err := bus.GetResult(ctx, c.js, attemptID)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNoResult
	}
	return r, err
}

// WaitResult polls the durable stream until the attempt's result is there.
func (c *Client) WaitResult(ctx context.Context, attemptID string) (*bus.Result, error) {
	for {
		r, err := c.Result(ctx, attemptID)
		if !errors.Is(err, ErrNoResult) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Cancel asks the worker running attemptID to cancel it; the attempt then
// ends with status cancelled. An attempt that is not running (queued,
// finished, unknown) is no_active_run.
func (c *Client) Cancel(ctx context.Context, attemptID, reason string) error {
	subj, err := bus.RunCancelSubject(attemptID)
	if err != nil {
		return err
	}
	body, err := bus.Encode(&bus.CancelRequest{V: bus.Version, Reason: reason})
	if err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, subj, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running", attemptID)
	}
	if err != nil {
		return fmt.Errorf("cancel %s: no answer (the run may have ended as the request arrived, or its worker is unreachable): %w", attemptID, err)
	}
	var rep bus.Reply
	if err := bus.Decode(msg.Data, &rep); err != nil {
		return fmt.Errorf("cancel reply: %w", err)
	}
	return rep.Err()
}

// requestTimeout bounds a request whose context has no deadline: a request
// that reaches a subscription as it goes away is never answered.
const requestTimeout = 10 * time.Second

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, requestTimeout)
}
