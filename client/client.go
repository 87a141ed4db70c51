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

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/retry"
)

// Client talks to a teamster fleet over one NATS connection, which the caller
// owns: Close stops the client, never the connection.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream

	// Events of attempts whose reply subject the client chose arrive on one
	// wildcard subscription, <inbox>.*, and are routed to their handle by
	// the last token: no subscription per attempt.
	inbox   string
	nextTok atomic.Uint64

	mu sync.Mutex
	// sub is the events subscription, made by the first submit that needs
	// it. A subscribe that failed leaves it nil, so the next submit tries
	// again instead of failing for the client's life.
	sub *nats.Subscription
	// handles holds every handle the client follows, by token, until its
	// attempt can send nothing more (see follow).
	handles map[string]*Handle
	closed  bool
	// done is closed by Close; it wakes every Handle.Result waiting.
	done chan struct{}
}

// ErrClientClosed says the client was closed (Client.Close): it submits
// nothing more, and its handles get no result from it.
var ErrClientClosed = errors.New("the teamster client is closed")

// New returns a client on nc.
func New(nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, js: js, inbox: nc.NewInbox(), handles: map[string]*Handle{}, done: make(chan struct{})}, nil
}

// Close stops the client: it unsubscribes the events subscription and stops
// following every handle (their Events channels close, a Result waiting
// returns ErrClientClosed), and later submits fail with ErrClientClosed. The
// attempts themselves go on; their durable results stay readable (Result,
// WaitResult, which still work, as do Cancel and the other requests). Close
// leaves the NATS connection open: the caller owns it. Host servers
// (ServeHost) have their own Stop.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.done)
	sub := c.sub
	c.sub = nil
	hs := make([]*Handle, 0, len(c.handles))
	for _, h := range c.handles {
		hs = append(hs, h)
	}
	clear(c.handles)
	c.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	for _, h := range hs {
		h.abandon()
	}
}

// follow registers h with the client and gives it its reply subject: a
// fresh subject under the client's events subscription (made here on first
// use) when the attempt names none, else a subscription of its own to the
// subject it names. It fails once the client is closed.
//
// A handle stops being followed when its result arrives, when Result finds
// the result in the durable stream, on Close and on the client's Close. So
// that a handle is never kept for the client's life (an attempt whose result
// event was lost, submitted by a caller that never calls Result or Close),
// an accepted attempt is also followed only for as long as its events can
// come: its queue timeout, run timeout and settlement budget, plus
// followSlack for the fleet to settle and send a result (lease expiry,
// reaper grace and send window). After that its Events channel closes; its
// Result still finds the durable result.
func (c *Client) follow(h *Handle, at *bus.Attempt) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClientClosed
	}
	tok := strconv.FormatUint(c.nextTok.Add(1), 36)
	r := route{c: c, tok: tok}
	if at.ReplyTo == "" {
		if c.sub == nil {
			sub, err := c.nc.Subscribe(c.inbox+".*", c.route)
			if err != nil {
				return fmt.Errorf("subscribe %s.*: %w", c.inbox, err)
			}
			_ = sub.SetPendingLimits(-1, -1)
			c.sub = sub
		}
		at.ReplyTo = c.inbox + "." + tok
	} else {
		// The callback waits until h is set up: a stray message on a
		// subject the caller chose may come at once.
		ready := make(chan struct{})
		defer close(ready)
		sub, err := c.nc.Subscribe(at.ReplyTo, func(m *nats.Msg) {
			<-ready
			h.onEvent(m)
		})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", at.ReplyTo, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		r.sub = sub
	}
	c.handles[tok] = h
	h.route = r
	return nil
}

// followSlack is how long after an attempt's own deadlines (queue, run,
// settlement) its handle still follows it: time for the fleet to find a
// dead worker (its lease TTL), settle the attempt, and send its result
// (reaper grace and send window), with room to spare.
const followSlack = 2 * time.Minute

// followFor is how long a handle follows an accepted attempt (a variable so
// that a test can shorten it).
var followFor = func(a *bus.Attempt) time.Duration {
	return a.QueueTimeout() + a.Timeout() + a.SettlementTimeout() + followSlack
}

// route is a handle's place in the client: its token in the routing map
// and, for an attempt that named its own reply subject, that subscription.
type route struct {
	c   *Client
	tok string
	sub *nats.Subscription
}

// end removes the route: no event reaches the handle any more.
func (r route) end() {
	r.c.mu.Lock()
	delete(r.c.handles, r.tok)
	r.c.mu.Unlock()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}

// route hands an event on the events subscription to its handle.
func (c *Client) route(m *nats.Msg) {
	tok := m.Subject[len(c.inbox)+1:]
	c.mu.Lock()
	h := c.handles[tok]
	c.mu.Unlock()
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

// RejectedError is the router's refusal of a submit. Reply is the router's
// answer, with the selection record when selection ran (which harness was
// asked for, the candidates and why none fit). It unwraps to the reply's
// *teamster.Error, so errors.Is(err, teamster.ErrHarnessNotRegistered),
// errors.As into a *teamster.Error and teamster.CodeOf see its code.
type RejectedError struct {
	Reply *bus.SubmitReply
}

func (e *RejectedError) Error() string {
	if e.Reply == nil || e.Reply.Error == nil {
		return "the router rejected the attempt"
	}
	return e.Reply.Error.Error()
}

// Unwrap returns the reply's *teamster.Error.
func (e *RejectedError) Unwrap() error {
	if e.Reply == nil || e.Reply.Error == nil {
		return nil
	}
	return e.Reply.Error
}

// Submit submits a prepared attempt on teamster.submit and follows it. The
// reply subject is a fresh one under the client's own inbox (served by the
// client's one events subscription) unless the attempt names one. It
// returns the handle of an accepted attempt. A rejection is a nil handle and
// a *RejectedError, which carries the router's reply (and its selection
// record) and unwraps to the *teamster.Error. A fallback reply is not an
// error: the handle carries the reply, follows nothing (the gateway runs the
// turn itself) and needs no Close. After Close, Submit fails with
// ErrClientClosed.
func (c *Client) Submit(ctx context.Context, a *bus.Attempt) (*Handle, error) {
	return c.submit(ctx, bus.SubjectSubmit, a)
}

func (c *Client) submit(ctx context.Context, subject string, a *bus.Attempt) (*Handle, error) {
	at := *a
	if at.V == 0 {
		at.V = bus.Version
	}
	if at.AttemptID == "" {
		// The id is chosen here, not by the router, so that a submit whose
		// reply is lost can be sent again as the same attempt.
		at.AttemptID = ulid.Make().String()
	}
	h := &Handle{c: c, arrived: make(chan struct{})}
	if err := c.follow(h, &at); err != nil {
		return nil, err
	}
	var rep bus.SubmitReply
	if err := c.submitRequest(ctx, subject, &at, &rep); err != nil {
		h.Close()
		return nil, err
	}
	h.mu.Lock()
	h.Reply = &rep
	h.mu.Unlock()
	switch rep.Status {
	case bus.StatusAccepted:
		h.mu.Lock()
		if !h.finished {
			h.expiry = time.AfterFunc(followFor(&at), h.abandon)
		}
		h.mu.Unlock()
		return h, nil
	case bus.StatusRejected:
		h.Close()
		return nil, &RejectedError{Reply: &rep}
	default: // fallback
		h.Close()
		return h, nil
	}
}

// submitTry bounds the wait for the reply to one submit request: longer
// than a router takes to answer one during a JetStream leader election
// (router.SubmitPublishBudget, 20 s, of tries to publish, after its Redis
// work, milliseconds normally), so that a submit is sent again when its
// request or its reply was lost, not while a router is still publishing
// it. Should it be sent again all the same (Redis slow as well), the router
// answers the second from the record while the first goes on, which is
// safe. A variable so that a test can shorten it.
var submitTry = 25 * time.Second

// submitBudget bounds the tries of a submit whose context has no deadline:
// one full wait for a reply and a few seconds more, for a resubmit, which
// the router answers from its record at once. (A variable, with submitTry.)
var submitBudget = 30 * time.Second

// submitRequest sends the submit of at and decodes the reply into rep. When
// the reply does not come (the request or the reply was lost: a router or a
// NATS node died, a connection was reconnecting; no reply within
// submitTry) or no router is subscribed (routers reconnecting, restarting),
// it sends the same submit again, with backoff, until ctx ends or, when ctx
// has no deadline, submitBudget has passed. That is safe: at
// carries its attempt id (submit sets one), the body is the same bytes, and
// the router answers a resubmit of an accepted attempt from its record (the
// stored reply) and never runs it twice. Any answer ends it, a rejection
// too.
func (c *Client) submitRequest(ctx context.Context, subject string, at *bus.Attempt, rep *bus.SubmitReply) error {
	body, err := bus.Encode(at)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, submitBudget)
		defer cancel()
	}
	var (
		msg  *nats.Msg
		lost error // the last try that got no answer
	)
	err = retry.For(ctx, 0, func() error {
		tctx, cancel := context.WithTimeout(ctx, submitTry)
		defer cancel()
		m, err := c.nc.RequestMsgWithContext(tctx, &nats.Msg{Subject: subject, Data: body})
		switch {
		case err == nil:
			msg = m
			return nil
		case ctx.Err() != nil:
			lost = err
			return backoff.Permanent(ctx.Err())
		case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded),
			errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrReconnectBufExceeded):
			lost = err // lost, or nobody to answer yet: send it again
			return err
		default:
			return backoff.Permanent(err)
		}
	})
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(lost, nats.ErrNoResponders):
		return teamster.Errorf(teamster.CodeInternal, "no router is serving %s", subject)
	case ctx.Err() != nil:
		return fmt.Errorf("submit %s: no reply (submit it again with the same attemptId to learn its fate): %w", at.AttemptID, ctx.Err())
	default:
		return err
	}
	if err := bus.Decode(msg.Data, rep); err != nil {
		return fmt.Errorf("%s reply: %w", subject, err)
	}
	return nil
}

// unfollow ends h's route, once. h.mu may be held.
func (h *Handle) unfollow() {
	h.stop.Do(h.route.end)
}

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
