package bus

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/internal/retry"
)

// Transient says whether a JetStream API error may pass by trying again:
// no answer in time (a stream or meta leader election, a cluster still
// forming), no responders (JetStream not up yet), or a server answer that
// JetStream is unavailable (HTTP-like code 503), or something a router has
// not created yet (ErrNotSetUp). A refusal of the request
// itself (a bad or conflicting configuration, a permission) is not.
func Transient(err error) bool {
	if errors.Is(err, ErrNotSetUp) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code >= 500 || api.Code == 408
	}
	return err != nil
}

// tryTimeout bounds each try of RetryTransient: a JetStream API request
// whose answer was lost in a leader change is never answered, and waiting
// for it would spend the whole budget on one try.
var tryTimeout = 10 * time.Second

// RetryTransient runs op until it succeeds, fails with an error that is not
// Transient, ctx ends or budget passes, calling onRetry with each transient
// failure (to log it). Each try gets a context of its own, ending after
// tryTimeout. It is how a starting router or worker waits out a cluster
// still forming or electing a stream's leader.
func RetryTransient(ctx context.Context, budget time.Duration, onRetry func(error), op func(ctx context.Context) error) error {
	return retry.For(ctx, budget, func() error {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		err := op(tctx)
		cancel()
		if err == nil {
			return nil
		}
		if !Transient(err) {
			return backoff.Permanent(err)
		}
		onRetry(err)
		return err
	})
}
