package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Inject steers a running turn. Address it by SessionKey (the router finds
// the session's running attempt) or AttemptID. AuthorityKind is "run" for
// ordinary input or "source-bound" with Source {id, generation}: such input
// is dispatched only while that source's authority still has that
// generation, checked by the harness at the last moment. The reply says
// accepted (with the injection id; its settlement arrives as an injection
// event on the attempt's replyTo) or rejected with a code: no_active_run,
// injection_requires_v2 (source-bound input to a V1 harness), source_revoked,
// lease_lost.
func (c *Client) Inject(ctx context.Context, req bus.InjectRequest) (*bus.InjectReply, error) {
	req.V = bus.Version
	if req.AuthorityKind == "" {
		req.AuthorityKind = bus.AuthorityRun
	}
	var rep bus.InjectReply
	if err := c.request(ctx, bus.SubjectInject, nil, &req, &rep); err != nil {
		return nil, err
	}
	if rep.Error != nil {
		return &rep, rep.Error
	}
	return &rep, nil
}

// GrantSource grants source id the given generation (a new grant must be
// higher than any revoked one).
func (c *Client) GrantSource(ctx context.Context, id string, generation int64) error {
	var rep bus.Reply
	if err := c.request(ctx, bus.SubjectSourceGrant, nil, &bus.SourceGrant{V: bus.Version, ID: id, Generation: generation}, &rep); err != nil {
		return err
	}
	return rep.Err()
}

// RevokeSource revokes source id, permanently for every generation up to the
// current one. Source-bound input of that source in flight is dropped with
// source_revoked.
func (c *Client) RevokeSource(ctx context.Context, id string) error {
	var rep bus.Reply
	if err := c.request(ctx, bus.SubjectSourceRevoke, nil, &bus.SourceRevoke{V: bus.Version, ID: id}, &rep); err != nil {
		return err
	}
	return rep.Err()
}

// request sends an envelope to a router subject (with header, when not nil)
// and decodes the reply. A request whose context has no deadline is bounded
// at requestTimeout; no router serving the subject is internal.
func (c *Client) request(ctx context.Context, subject string, header nats.Header, req any, rep bus.Envelope) error {
	body, err := bus.Encode(req)
	if err != nil {
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
