package client

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster/bus"
)

// Client talks to a teamster fleet over one NATS connection, which the caller
// owns: Close stops the client, never the connection.
type Client struct {
	nc *nats.Conn
	// gateway is the client's tenant (WithGateway); "" for the unnamed one.
	gateway string

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

// Option configures a client.
type Option func(*Client)

// WithGateway makes the client speak for gateway gatewayID (a tenant):
// every request goes on its identified subject,
// <subject>.gateway.<gatewayId>, which the shipped NATS permissions let only
// that gateway publish, so its sessions, attempts, sources and results are
// its own namespace. Submit then submits on
// teamster.submit.gateway.<gatewayId> with hostId defaulting to gatewayID,
// SubmitAsDelegate on the delegate's subject bound to the gateway, and
// Result reads the gateway's own results. The connection's inbox prefix
// (nats.CustomInboxPrefix) must be the gateway's own, _INBOX.gateway.<id>
// (bus.InboxPrefix), or for a delegate bound to it
// _INBOX.delegate.<id>.<pluginId> (bus.DelegateInboxPrefix): routers answer
// nothing and workers send no event outside it.
func WithGateway(gatewayID string) Option { return func(c *Client) { c.gateway = gatewayID } }

// New returns a client on nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	c := &Client{nc: nc, inbox: nc.NewInbox(), handles: map[string]*Handle{}, done: make(chan struct{})}
	for _, o := range opts {
		o(c)
	}
	if c.gateway != "" {
		if err := bus.CheckID("gatewayId", c.gateway); err != nil {
			return nil, err
		}
		if !bus.ReplyToAllowed(c.gateway, c.inbox) {
			return nil, fmt.Errorf("client: gateway %s: the connection's inbox prefix (%s) is not the gateway's own (%s) nor one of its delegates' (set nats.CustomInboxPrefix): the fleet answers nothing outside it",
				c.gateway, c.inbox[:strings.LastIndexByte(c.inbox, '.')], "_INBOX.gateway."+c.gateway)
		}
	}
	return c, nil
}

// Gateway is the tenant the client speaks for ("" for the unnamed one).
func (c *Client) Gateway() string { return c.gateway }

// Conn is the client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

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
