package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

// Reading an attempt's durable result by its id: what a gateway that
// restarted, or that dropped its handle, still has.

// Result reads an attempt's durable result, through the routers
// (teamster.get.result): ErrNoResult when there is none (yet, any more, or
// the attempt is not this client's gateway's).
func (c *Client) Result(ctx context.Context, attemptID string) (*bus.Result, error) {
	var rep bus.ResultReply
	if err := c.request(ctx, bus.SubjectGetResult, nil, &bus.ResultRequest{V: bus.Version, AttemptID: attemptID}, &rep); err != nil {
		return nil, err
	}
	if rep.Error != nil {
		return nil, rep.Error
	}
	if len(rep.Result) == 0 {
		return nil, ErrNoResult
	}
	var r bus.Result
	if err := bus.Decode(rep.Result, &r); err != nil {
		return nil, fmt.Errorf("result of %s: %w", attemptID, err)
	}
	if r.AttemptID != attemptID {
		return nil, fmt.Errorf("result of %s: the fleet answered with attempt %s's", attemptID, r.AttemptID)
	}
	return &r, nil
}

// Harnesses returns the manifests of the harnesses live workers host now,
// through the routers (teamster.get.harnesses).
func (c *Client) Harnesses(ctx context.Context) ([]selection.Manifest, error) {
	var rep bus.HarnessesReply
	if err := c.request(ctx, bus.SubjectGetHarnesses, nil, &bus.HarnessesRequest{V: bus.Version}, &rep); err != nil {
		return nil, err
	}
	if rep.Error != nil {
		return nil, rep.Error
	}
	return rep.Harnesses, nil
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
