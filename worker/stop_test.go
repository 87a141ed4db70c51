package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/worker"
)

// longDrain is a drain timeout no test here waits for: what ends its runs is
// the Stop.
const longDrain = 10 * time.Minute

// sleepers submits n turns that sleep far beyond the test and waits until
// each is claimed.
func sleepers(t *testing.T, f *fleettest.Fleet, prefix string, n int) []*client.Handle {
	t.Helper()
	var hs []*client.Handle
	for i := 0; i < n; i++ {
		h := submit(t, f.Client, fleettest.Attempt(fmt.Sprintf("%s-%d", prefix, i), fleettest.Script(`{"sleep":600000}`)))
		fleettest.WaitEvent(t, h, bus.EventClaimed)
		hs = append(hs, h)
	}
	return hs
}

// stoppedWithOneResultEach checks that every turn ended drain_timeout with
// exactly one result event, that w stopped, and that it holds no lease.
func stoppedWithOneResultEach(t *testing.T, f *fleettest.Fleet, w *worker.Worker, hs []*client.Handle) {
	t.Helper()
	for _, h := range hs {
		r := result(t, h)
		if r.Error == nil || r.Error.Code != teamster.CodeDrainTimeout || r.Status != teamster.StatusCancelled {
			t.Fatalf("result %+v, want drain_timeout", r)
		}
		n := 0
		for e := range h.Events() {
			if e.Type == bus.EventResult {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d result events for %s, want 1", n, h.AttemptID())
		}
	}
	select {
	case <-w.Done():
	case <-time.After(wait):
		t.Fatal("the worker did not stop")
	}
	if st := worker.State(w); st != bus.WorkerStopped {
		t.Fatalf("state %s, want stopped", st)
	}
	if held, _, err := leases.NewStore(f.RDB).Leases(t.Context(), 10); err != nil || held != 0 {
		t.Fatalf("%d session leases held after the stop (%v), want 0: every run releases its lease", held, err)
	}
}

// Stop does not wait for the drain timeout: it cancels the running turns
// at once with drain_timeout, each records and publishes its one result,
// and the worker stops. It returns without waiting; Done says when.
func TestStopCancelsTheRunningTurnsAtOnce(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1, DrainTimeout: longDrain})
	w := f.Workers[0]
	hs := sleepers(t, f, "stop", 3)
	w.Stop()
	stoppedWithOneResultEach(t, f, w, hs)
	if err := worker.Resume(w); err == nil {
		t.Fatal("a stopped worker was resumed")
	}
	w.Stop() // a second Stop changes nothing
	if err := w.Drain(t.Context()); err != nil {
		t.Fatalf("Drain after Stop: %v, want nil (stopped)", err)
	}
}

// A Stop during a drain ends the drain's wait for the runs: they are
// cancelled with drain_timeout, the Drain returns nil (the worker stopped),
// and a resume is refused from the Stop on.
func TestStopDuringADrainEndsIt(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1, DrainTimeout: longDrain})
	w := f.Workers[0]
	hs := sleepers(t, f, "stop-drain", 2)
	drained := make(chan error, 1)
	go func() { drained <- w.Drain(context.Background()) }()
	deadline := time.Now().Add(wait)
	for worker.State(w) != bus.WorkerDraining {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not start draining")
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.Stop()
	if err := worker.Resume(w); err == nil {
		t.Fatal("a resume after Stop undid the drain")
	}
	stoppedWithOneResultEach(t, f, w, hs)
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("the drain the Stop ended returned %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("the drain did not return after the Stop")
	}
}

// A worker stopped before it was started stops at once and cannot be
// started afterwards, as with Drain.
func TestStopBeforeStartStops(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	rdb := redis.NewClient(&redis.Options{Addr: f.Redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	w, err := worker.New(worker.Params{Config: worker.DevConfig("early-stop", 4), NATS: f.Connect("early-stop"), Redis: rdb, Logger: f.Log})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	select {
	case <-w.Done():
	default:
		t.Fatal("Done is not closed after a Stop before Start")
	}
	if st := worker.State(w); st != bus.WorkerStopped {
		t.Fatalf("state %s, want stopped", st)
	}
	if err := w.Start(t.Context()); err == nil {
		t.Fatal("Start after the Stop succeeded")
	}
}
