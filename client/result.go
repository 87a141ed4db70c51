package client

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/bus"
)

// Reading an attempt's durable result by its id: what a gateway that
// restarted, or that dropped its handle, still has.

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
