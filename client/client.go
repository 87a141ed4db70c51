package client

import (
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// New returns a client on nc.
func New(nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, js: js, inbox: nc.NewInbox(), handles: map[string]*Handle{}, done: make(chan struct{})}, nil
}

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
