package client

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster/bus"
)

// How the client routes the events of the attempts it submitted to their
// handles, and for how long it follows each.

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
// come: its queue timeout, run timeout and grace (settlementTimeoutMs), plus
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
