package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// The request/reply plumbing of the requests the router serves (inject,
// session operations, source grants and revokes).

// requestTimeout bounds a request whose context has no deadline: a request
// that reaches a subscription as it goes away is never answered.
const requestTimeout = 10 * time.Second

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, requestTimeout)
}

// request sends an envelope to a router subject (with header, when not nil)
// and decodes the reply. A request whose context has no deadline is bounded
// at requestTimeout; no router serving the subject is internal.
func (c *Client) request(ctx context.Context, subject string, header nats.Header, req any, rep bus.Envelope) error {
	body, err := bus.Encode(req)
	if err != nil {
		return err
	}
	if subject, err = bus.Identified(subject, c.gateway); err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	msg, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Header: header, Data: body})
	if errors.Is(err, nats.ErrNoResponders) {
		return teamster.Errorf(teamster.CodeInternal, "no router is serving %s", subject)
	}
	if err != nil {
		return err
	}
	if err := bus.Decode(msg.Data, rep); err != nil {
		return fmt.Errorf("%s reply: %w", subject, err)
	}
	return nil
}
