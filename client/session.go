package client

import (
	"context"

	"github.com/teamster-fleet/teamster/bus"
)

// Session operations: the owner's changes to a session's record.

// SessionOp runs an owner-only operation (create, patch, reset, delete,
// archive) on a session's record. It is session_busy while a turn of the
// session runs. reset clears the native binding and the model-selection lock
// (pass the new sessionId in body); delete removes the record; both also ask
// a worker hosting the pinned harness to clear its native state.
func (c *Client) SessionOp(ctx context.Context, op string, body bus.SessionOp) error {
	return c.sessionOp(ctx, op, body, "")
}

// SessionOpAsDelegate sends a session operation as a delegate would: the
// router refuses it with owner_only. It exists so that a delegate's client
// (and the tests) can see that refusal; NATS permissions normally keep a
// delegate off teamster.session.* altogether.
func (c *Client) SessionOpAsDelegate(ctx context.Context, pluginID, op string, body bus.SessionOp) error {
	return c.sessionOp(ctx, op, body, pluginID)
}

// SessionOpFound is SessionOp, and also says whether the session had a
// record: a reset or delete of a session without one succeeds with found
// false (nothing to do); the other operations fail without one.
func (c *Client) SessionOpFound(ctx context.Context, op string, body bus.SessionOp) (found bool, err error) {
	rep, err := c.sessionOpReply(ctx, op, body, "")
	if err != nil {
		return false, err
	}
	return !rep.NoRecord, nil
}

func (c *Client) sessionOp(ctx context.Context, op string, body bus.SessionOp, delegate string) error {
	_, err := c.sessionOpReply(ctx, op, body, delegate)
	return err
}

func (c *Client) sessionOpReply(ctx context.Context, op string, body bus.SessionOp, delegate string) (*bus.Reply, error) {
	subj, err := bus.SessionOpSubject(op)
	if err != nil {
		return nil, err
	}
	body.V = bus.Version
	var rep bus.Reply
	if err := c.request(ctx, subj, bus.DelegateHeader(delegate), &body, &rep); err != nil {
		return nil, err
	}
	return &rep, rep.Err()
}
