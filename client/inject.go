package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Requests to a running turn: steering it with injected input, cancelling
// it.

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
	if subj, err = bus.Identified(subj, c.gateway); err != nil {
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
