package worker

import (
	"context"
	"testing"
	"time"
)

// A poller hands a fetched message to a claim only when there is room among
// the claims in progress; when fetching stops while it waits (a drain), it
// gets false and gives the message back (take NAKs it and frees its slot).
func TestStartClaimWaitsForRoomAndStopsWithFetching(t *testing.T) {
	w := &Worker{fetch: fetcher{claiming: make(chan struct{}, 2)}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	for i := range 2 {
		if !w.startClaim(ctx) {
			t.Fatalf("claim %d refused with room left", i)
		}
	}
	// Full: the third waits until a claim ends.
	got := make(chan bool, 1)
	go func() { got <- w.startClaim(ctx) }()
	select {
	case ok := <-got:
		t.Fatalf("a claim started beyond the bound (%v)", ok)
	case <-time.After(50 * time.Millisecond):
	}
	<-w.fetch.claiming // one claim ends
	if ok := <-got; !ok {
		t.Fatal("the waiting claim was refused after room was made")
	}
	// Full again, and fetching stops while a fourth waits.
	go func() { got <- w.startClaim(ctx) }()
	stop()
	if ok := <-got; ok {
		t.Fatal("a claim started after fetching stopped")
	}
	if n := len(w.fetch.claiming); n != 2 {
		t.Fatalf("%d claims in progress, want 2 (the refused one took no room)", n)
	}
	// Once stopped, nothing starts even with room.
	<-w.fetch.claiming
	if w.startClaim(ctx) {
		t.Fatal("a claim started after fetching stopped, with room")
	}
}
