// Package retry is the retry loop of the attempt path: exponential backoff
// (cenkalti/backoff) within a time budget, with a first try that costs
// nothing when it succeeds.
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// For retries op with exponential backoff (from 50 ms, at most 2 s apart)
// until it succeeds, fails permanently (backoff.Permanent, whose error it
// returns unwrapped), ctx ends, or maxElapsed passes.
//
// The first try runs before any schedule is built: nearly every call on an
// attempt's path succeeds at once, and a schedule costs allocations on
// every call. Only a failure goes on to after.
func For(ctx context.Context, maxElapsed time.Duration, op func() error) error {
	if err := op(); err != nil {
		return after(ctx, maxElapsed, op, err)
	}
	return nil
}

// after goes on from a first try of op that failed with err. It hands err to
// backoff.Retry as the result of Retry's own first try, so the waits and the
// elapsed budget are the library's, as if Retry had made that try.
func after(ctx context.Context, maxElapsed time.Duration, op func() error, err error) error {
	var permanent *backoff.PermanentError
	if errors.As(err, &permanent) {
		return permanent.Err
	}
	first := true
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(maxElapsed))
	return backoff.Retry(func() error {
		if first {
			first = false
			return err
		}
		return op()
	}, backoff.WithContext(bo, ctx))
}
