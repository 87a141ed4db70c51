package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/bus"
)

// A try whose answer never comes (a JetStream request lost in a leader
// change) ends at the per-try timeout and is tried again, instead of
// spending the whole budget.
func TestRetryTransientBoundsEachTry(t *testing.T) {
	bus.SetTryTimeout(t, 50*time.Millisecond)
	tries := 0
	err := bus.RetryTransient(context.Background(), time.Minute, func(error) {}, func(ctx context.Context) error {
		tries++
		if tries == 1 {
			<-ctx.Done() // no answer: only the try's own deadline ends it
			return ctx.Err()
		}
		return nil
	})
	if err != nil || tries != 2 {
		t.Fatalf("err %v after %d tries, want success on the second", err, tries)
	}
	// A refusal is not tried again.
	tries = 0
	refused := &jetstream.APIError{Code: 400, Description: "bad config"}
	err = bus.RetryTransient(context.Background(), time.Minute, func(error) {}, func(context.Context) error {
		tries++
		return refused
	})
	if !errors.Is(err, refused) || tries != 1 {
		t.Fatalf("err %v after %d tries, want the refusal after one", err, tries)
	}
}
