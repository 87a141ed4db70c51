package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// 200 sessions x 5 turns, sessions submitted concurrently (each session's turns
// in order): every attempt has exactly one terminal result; within each
// session runs never overlap and run in acceptance order; nothing runs twice.
func TestManySessionsInOrderOneResultEach(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 3})
	const sessions, turns = 200, 5
	type sub struct {
		session string
		h       *client.Handle
	}
	var mu sync.Mutex
	accepted := map[string][]string{} // session -> attempt ids in acceptance order
	var all []sub
	var wg sync.WaitGroup
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			session := fmt.Sprintf("agent:main:s%03d", s)
			for k := 0; k < turns; k++ {
				prompt := fleettest.Script(fmt.Sprintf(`{"sleep":%d}`, rand.IntN(15)), fmt.Sprintf(`{"say":"turn %d"}`, k))
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				h, err := f.Client.Submit(ctx, fleettest.Attempt(session, prompt))
				cancel()
				if err != nil || h.Reply.Status != bus.StatusAccepted {
					t.Errorf("submit %s turn %d: %v", session, k, err)
					return
				}
				mu.Lock()
				accepted[session] = append(accepted[session], h.AttemptID())
				all = append(all, sub{session, h})
				mu.Unlock()
			}
		}(s)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	results := map[string]*bus.Result{}
	for _, s := range all {
		r := result(t, s.h)
		if r.Status != teamster.StatusOK {
			t.Fatalf("attempt %s: %+v", s.h.AttemptID(), r)
		}
		results[s.h.AttemptID()] = r
		// Exactly one result event reached the submitter.
		n := 0
		for e := range s.h.Events() {
			if e.Type == bus.EventResult {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("attempt %s: %d result events", s.h.AttemptID(), n)
		}
	}
	if len(results) != sessions*turns {
		t.Fatalf("%d results, want %d", len(results), sessions*turns)
	}
	entries := f.Ledger.Entries()
	if err := scripted.CheckLedger(entries); err != nil {
		t.Fatalf("overlapping runs: %v", err)
	}
	if err := scripted.CheckReplays(entries); err != nil {
		t.Fatal(err)
	}
	if err := scripted.CheckSteps(entries); err != nil {
		t.Fatal(err)
	}
	checkRunOrder(t, entries, accepted)
}

// checkRunOrder checks that every session's runs started in acceptance order.
func checkRunOrder(t *testing.T, entries []scripted.Entry, accepted map[string][]string) {
	t.Helper()
	started := map[string][]string{}
	for _, e := range entries {
		if e.Event == scripted.EventStart {
			started[e.Session] = append(started[e.Session], e.Attempt)
		}
	}
	for session, want := range accepted {
		got := started[session]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("session %s ran %v, accepted %v", session, got, want)
		}
	}
}

// A worker killed mid-run (connections closed, no clean-up): its attempt gets
// worker_lost, is never run again, and the session's next turn runs on
// another worker.
func TestKilledWorkerAttemptIsWorkerLostAndNeverReplayed(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 3})
	h1 := submit(t, f, fleettest.Attempt("sess-kill", fleettest.Script(`{"say":"working"}`, `{"sleep":60000}`)))
	claimed := waitEvent(t, h1, bus.EventClaimed)
	var cd bus.ClaimedData
	mustJSON(t, claimed.Data, &cd)
	h2 := submit(t, f, fleettest.Attempt("sess-kill", "the next turn"))
	f.Worker(cd.WorkerID).Kill()

	r1 := result(t, h1)
	if r1.Error == nil || r1.Error.Code != teamster.CodeWorkerLost || r1.Error.SideEffects != teamster.SideEffectsPossible || r1.WorkerID != cd.WorkerID {
		t.Fatalf("killed worker's attempt: %+v", r1)
	}
	r2 := result(t, h2)
	if r2.Status != teamster.StatusOK || r2.WorkerID == cd.WorkerID {
		t.Fatalf("next turn: %+v, want ok on another worker", r2)
	}
	// Never run again: one start of the first attempt, on the killed worker.
	if err := scripted.CheckReplays(f.Ledger.Entries()); err != nil {
		t.Fatal(err)
	}
	// The reaper's result continues after the worker's reserved seqs.
	if claimed.Seq != 1 {
		t.Fatalf("claimed seq %d", claimed.Seq)
	}
}

// An attempt nobody claims within queueTimeoutMs gets queue_timeout: behind a
// long turn of its session, and when no worker runs at all.
func TestQueueTimeout(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	long := submit(t, f, fleettest.Attempt("sess-q", fleettest.Script(`{"sleep":60000}`)))
	waitEvent(t, long, bus.EventClaimed)
	a := fleettest.Attempt("sess-q", "behind the long turn")
	a.QueueTimeoutMs = 300
	behind := submit(t, f, a)
	r := result(t, behind)
	if r.Status != teamster.StatusTimeout || r.Error.Code != teamster.CodeQueueTimeout || r.Error.SideEffects != teamster.SideEffectsNone {
		t.Fatalf("queued behind a long turn: %+v", r)
	}
	if err := f.Client.Cancel(t.Context(), long.AttemptID(), "test over"); err != nil {
		t.Fatal(err)
	}

	// No worker at all: they died; their registry entries still stand, so
	// the router accepts, and nobody claims.
	for _, w := range f.Workers {
		w.Kill()
	}
	b := fleettest.Attempt("sess-q2", "nobody home")
	b.QueueTimeoutMs = 300
	orphan := submit(t, f, b)
	r = result(t, orphan)
	if r.Error == nil || r.Error.Code != teamster.CodeQueueTimeout {
		t.Fatalf("with no worker: %+v", r)
	}
}

// The same attemptId submitted twice, concurrently by two clients: it runs
// once and both callers see the same result.
func TestResubmitRunsOnce(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 3})
	other, err := client.New(f.Connect("client-2"))
	if err != nil {
		t.Fatal(err)
	}
	a := fleettest.Attempt("sess-dup", fleettest.Script(`{"sleep":200}`, `{"say":"once"}`))
	a.AttemptID = "dup-attempt-1"
	var hs [2]*client.Handle
	var wg sync.WaitGroup
	for i, c := range []*client.Client{f.Client, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := c.Submit(t.Context(), a)
			if err != nil {
				t.Errorf("submit %d: %v", i, err)
				return
			}
			hs[i] = h
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, h := range hs {
		if h.AttemptID() != "dup-attempt-1" || h.Reply.Status != bus.StatusAccepted {
			t.Fatalf("reply %+v", h.Reply)
		}
	}
	// The first caller follows the events; the second reads the durable result.
	r1 := result(t, hs[0])
	r2 := result(t, hs[1])
	if r1.Status != teamster.StatusOK || r1.Fence != r2.Fence || r1.WorkerID != r2.WorkerID {
		t.Fatalf("results differ: %+v vs %+v", r1, r2)
	}
	starts := 0
	for _, e := range f.Ledger.Entries() {
		if e.Attempt == "dup-attempt-1" && e.Event == scripted.EventStart {
			starts++
		}
	}
	if starts != 1 {
		t.Fatalf("the attempt ran %d times", starts)
	}
	// A later resubmit is answered from the record, still one run.
	h3, err := other.Submit(t.Context(), a)
	if err != nil {
		t.Fatalf("late resubmit: %v", err) // a rejection's error carries the reply
	}
	if h3.Reply.Status != bus.StatusAccepted {
		t.Fatalf("late resubmit: %+v", h3.Reply)
	}
	if r3 := result(t, h3); r3.Fence != r1.Fence {
		t.Fatalf("late resubmit result %+v", r3)
	}
}

// timeoutMs exceeded gives timeout (the harness's context is cancelled: its
// 60 s sleep ends at once); cancel gives cancelled.
func TestTimeoutAndCancel(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	a := fleettest.Attempt("sess-t", fleettest.Script(`{"sleep":60000}`))
	a.TimeoutMs = 300
	h := submit(t, f, a)
	r := result(t, h)
	if r.Status != teamster.StatusTimeout || r.Error.Code != teamster.CodeDeadlineExceeded {
		t.Fatalf("timed out attempt: %+v", r)
	}
	assertEnded(t, f, h.AttemptID())

	c := submit(t, f, fleettest.Attempt("sess-c", fleettest.Script(`{"sleep":60000}`)))
	waitEvent(t, c, bus.EventClaimed)
	if err := f.Client.Cancel(t.Context(), c.AttemptID(), "user pressed stop"); err != nil {
		t.Fatal(err)
	}
	r = result(t, c)
	if r.Status != teamster.StatusCancelled || r.Error.Code != teamster.CodeCancelled {
		t.Fatalf("cancelled attempt: %+v", r)
	}
	assertEnded(t, f, c.AttemptID())
	// Cancelling what is not running is no_active_run.
	if err := f.Client.Cancel(t.Context(), c.AttemptID(), ""); !errors.Is(err, teamster.ErrNoActiveRun) {
		t.Fatalf("cancel after the end: %v, want no_active_run", err)
	}
}

// assertEnded checks the harness run of attempt ended (its ledger has the end).
func assertEnded(t *testing.T, f *fleettest.Fleet, attempt string) {
	t.Helper()
	for _, e := range f.Ledger.Entries() {
		if e.Attempt == attempt && e.Event == scripted.EventEnd {
			return
		}
	}
	t.Fatalf("the harness run of %s did not end", attempt)
}
