package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/retry"
)

// Submitting an attempt, as the gateway (teamster.submit, or
// teamster.submit.gateway.<gatewayId> for a gateway with an identity) or as
// a delegate plugin (teamster.submit.delegate.<pluginId>), and sending the
// submit again
// when its reply is lost.

// Submit submits a prepared attempt on teamster.submit and follows it. The
// reply subject is a fresh one under the client's own inbox (served by the
// client's one events subscription) unless the attempt names one. It
// returns the handle of an accepted attempt. A rejection is a nil handle and
// a *RejectedError, which carries the router's reply (and its selection
// record) and unwraps to the *teamster.Error. A fallback reply is not an
// error: the handle carries the reply, follows nothing (the gateway runs the
// turn itself) and needs no Close. After Close, Submit fails with
// ErrClientClosed.
//
// A client made WithGateway submits on the gateway's own subject, as
// SubmitAsGateway does.
func (c *Client) Submit(ctx context.Context, a *bus.Attempt) (*Handle, error) {
	if c.gateway != "" {
		return c.SubmitAsGateway(ctx, c.gateway, a)
	}
	return c.submit(ctx, bus.SubjectSubmit, a)
}

// SubmitAsGateway submits a prepared attempt, as Submit does, on
// teamster.submit.gateway.<gatewayId>: the submit of a gateway that has an
// identity of its own (the shipped NATS permissions let each gateway publish
// only its own subject, and subscribe only under its own inbox prefix,
// bus.InboxPrefix("gateway", gatewayID), set on the connection with
// nats.CustomInboxPrefix). The attempt's hostId defaults to gatewayID and
// must be it: the router refuses another with invalid_request, so a
// gateway's host callbacks go to no one else.
func (c *Client) SubmitAsGateway(ctx context.Context, gatewayID string, a *bus.Attempt) (*Handle, error) {
	subj, err := bus.SubmitGatewaySubject(gatewayID)
	if err != nil {
		return nil, err
	}
	if a.HostID == "" {
		at := *a
		at.HostID = gatewayID
		a = &at
	}
	return c.submit(ctx, subj, a)
}

// SubmitAsDelegate submits an attempt as the delegate plugin pluginID (for
// example a voice transport continuing a locked session) on
// teamster.submit.delegate.<pluginId>. The delegate's identity is that
// subject; NATS permissions keep a delegate on its own subject. The attempt
// must carry the session's exact stored facts (docs/PROTOCOL.md, "Delegated
// execution"); otherwise the reply is delegation_denied naming the field.
func (c *Client) SubmitAsDelegate(ctx context.Context, pluginID string, a *bus.Attempt) (*Handle, error) {
	subj, err := bus.SubmitDelegateSubject(pluginID)
	if err != nil {
		return nil, err
	}
	if subj, err = bus.Identified(subj, c.gateway); err != nil {
		return nil, err
	}
	return c.submit(ctx, subj, a)
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
	h := &Handle{c: c, id: at.AttemptID, arrived: make(chan struct{})}
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
