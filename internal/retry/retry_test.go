package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// For runs its first try before it builds a schedule; these pin that
// the retries around it are still the library's: permanent errors end at
// once, failures are retried after a wait, and the budget and the context
// end the retries.
func TestFor(t *testing.T) {
	errBusy := errors.New("busy")
	t.Run("a first success is one try", func(t *testing.T) {
		tries := 0
		if err := For(context.Background(), time.Second, func() error { tries++; return nil }); err != nil {
			t.Fatal(err)
		}
		if tries != 1 {
			t.Fatalf("tries = %d, want 1", tries)
		}
	})
	t.Run("a permanent first failure is not retried and comes back unwrapped", func(t *testing.T) {
		tries := 0
		err := For(context.Background(), time.Second, func() error { tries++; return backoff.Permanent(errBusy) })
		if err != errBusy || tries != 1 {
			t.Fatalf("err = %v, tries = %d; want %v after 1 try", err, tries, errBusy)
		}
	})
	t.Run("failures are retried after a wait until a success", func(t *testing.T) {
		var at []time.Time
		err := For(context.Background(), 10*time.Second, func() error {
			at = append(at, time.Now())
			if len(at) < 3 {
				return errBusy
			}
			return nil
		})
		if err != nil || len(at) != 3 {
			t.Fatalf("err = %v after %d tries; want nil after 3", err, len(at))
		}
		// The first interval is 50 ms, randomised by ±50%: never back to back.
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < 20*time.Millisecond {
				t.Fatalf("try %d came %s after the one before; want a backoff wait", i+1, gap)
			}
		}
	})
	t.Run("a permanent failure on a retry ends the retries", func(t *testing.T) {
		tries := 0
		err := For(context.Background(), 10*time.Second, func() error {
			tries++
			if tries == 1 {
				return errBusy
			}
			return backoff.Permanent(errBusy)
		})
		if err != errBusy || tries != 2 {
			t.Fatalf("err = %v, tries = %d; want %v after 2 tries", err, tries, errBusy)
		}
	})
	t.Run("the budget ends the retries with the last error", func(t *testing.T) {
		tries := 0
		start := time.Now()
		err := For(context.Background(), 300*time.Millisecond, func() error { tries++; return errBusy })
		if err != errBusy || tries < 2 {
			t.Fatalf("err = %v after %d tries; want %v after more than one", err, tries, errBusy)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("took %s for a 300ms budget", took)
		}
	})
	t.Run("a cancelled context ends the retries with its error", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		tries := 0
		err := For(ctx, time.Minute, func() error {
			tries++
			cancel()
			return errBusy
		})
		if !errors.Is(err, context.Canceled) || tries != 1 {
			t.Fatalf("err = %v after %d tries; want context.Canceled after 1", err, tries)
		}
	})
}
