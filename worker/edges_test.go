package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// wait bounds every wait here: a liveness bound, not a timing assertion.
const wait = fleettest.WaitTimeout

// edgeHarness is a harness whose turns do what their prompt names:
// "bad-session" returns a native session that is not JSON (once; later
// turns echo), "late-events" waits for its context to end and then reports
// lateEvents partial events, anything else is echoed.
type edgeHarness struct {
	badOnce atomic.Bool
}

const lateEvents = 300

func (h *edgeHarness) Manifest() selection.Manifest {
	return selection.Manifest{ID: "edge", Label: "Edge", PluginID: "edge", Injection: selection.InjectionNone}
}

func (h *edgeHarness) Supports(*bus.Attempt) (bool, string) { return true, "" }

func (h *edgeHarness) RunAttempt(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	switch run.Attempt.Prompt {
	case "bad-session":
		if h.badOnce.CompareAndSwap(false, true) {
			return &harness.Outcome{AssistantTexts: []string{"done"}, NativeSession: json.RawMessage(`{not json`)}, nil
		}
	case "late-events":
		<-ctx.Done()
		// What a harness reports in its grace: its context has ended.
		for i := 0; i < lateEvents; i++ {
			if err := run.Host.Emit(context.WithoutCancel(ctx), bus.EventPartial, map[string]int{"n": i}); err != nil {
				return nil, err
			}
		}
		return nil, ctx.Err()
	}
	return &harness.Outcome{AssistantTexts: []string{run.Attempt.Prompt}}, nil
}

var edge = &edgeHarness{}

func init() {
	worker.RegisterImplementation("edge", func(selection.Manifest, json.RawMessage, worker.FactoryEnv) (harness.Harness, error) {
		return edge, nil
	})
}

// edgeFleet is a fleet of n workers hosting the dev harnesses and "edge".
func edgeFleet(t *testing.T, n int) *fleettest.Fleet {
	return fleettest.Start(t, fleettest.Options{Workers: n, WorkerConfig: func(id string, slots int) *worker.Config {
		cfg := worker.DevConfig(id, slots)
		cfg.Harnesses = append(cfg.Harnesses, worker.HarnessConfig{Implementation: "edge", Manifest: edge.Manifest()})
		return cfg
	}})
}

func edgeAttempt(session, prompt string) *bus.Attempt {
	a := fleettest.Attempt(session, prompt)
	a.AgentHarnessID = "edge"
	a.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"edge"}}, RequestTransportOverrides: "none"}
	return a
}

func submit(t *testing.T, c *client.Client, a *bus.Attempt) *client.Handle {
	t.Helper()
	return fleettest.Submit(t, c, a)
}

func result(t *testing.T, h *client.Handle) *bus.Result {
	t.Helper()
	return fleettest.Result(t, h)
}

// resultEvents counts the result events that arrive on subject.
func resultEvents(t *testing.T, nc *nats.Conn, subject string) (count func() int, first <-chan []byte) {
	t.Helper()
	var n atomic.Int32
	ch := make(chan []byte, 1)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var e bus.Event
		if bus.Decode(m.Data, &e) == nil && e.Type == bus.EventResult {
			if n.Add(1) == 1 {
				ch <- e.Data
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int { return int(n.Load()) }, ch
}

// A submitter whose connection stays up gets its result event even when the
// worker dies after publishing and marking the result, before sending the
// event: a reaper takes the unconfirmed mark over once its send window has
// passed and sends the durable result. Exactly one event arrives.
func TestTheResultEventArrivesWhenItsWorkerDiesAfterMarking(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	w := f.Workers[0]
	var killed atomic.Bool
	worker.SetAfterMark(w, func(string) {
		if killed.CompareAndSwap(false, true) {
			w.Kill()
		}
	})
	a := fleettest.Attempt("last-event", "hello")
	a.ReplyTo = "_INBOX.lastevent.1"
	count, first := resultEvents(t, f.Connect("observer"), a.ReplyTo)
	h := submit(t, f.Client, a)

	var data []byte
	select {
	case data = <-first:
	case <-time.After(wait):
		t.Fatal("no result event arrived after the worker died between its mark and the event")
	}
	if !killed.Load() {
		t.Fatal("the worker was not killed after its mark; the test tested nothing")
	}
	var got bus.Result
	if err := bus.Decode(data, &got); err != nil {
		t.Fatal(err)
	}
	durable := result(t, h)
	if got.Status != teamster.StatusOK || len(got.AssistantTexts) != 1 || got.AssistantTexts[0] != "hello" || got.WorkerID != w.ID() {
		t.Fatalf("result event %+v, want the dead worker's ok result", got)
	}
	if durable.Fence != got.Fence || durable.Status != got.Status {
		t.Fatalf("durable result %+v differs from the result event %+v", durable, got)
	}
	// A second event would have come from a second take-over, a send window
	// later; give it that long.
	time.Sleep(2 * time.Second)
	if n := count(); n != 1 {
		t.Fatalf("%d result events, want 1", n)
	}
}

// A result the worker cannot encode (the harness returned a native session
// that is not JSON) ends the turn as harness_failed, and the session's next
// turn runs: the lease is not left with the keeper, renewed forever.
func TestAResultThatCannotBeEncodedEndsTheTurn(t *testing.T) {
	f := edgeFleet(t, 1)
	first := result(t, submit(t, f.Client, edgeAttempt("bad-session", "bad-session")))
	if first.Error == nil || first.Error.Code != teamster.CodeHarnessFailed || first.Error.SideEffects != teamster.SideEffectsPossible {
		t.Fatalf("first turn %+v, want harness_failed (side effects possible)", first)
	}
	a := edgeAttempt("bad-session", "next")
	a.QueueTimeoutMs = 20_000
	next := result(t, submit(t, f.Client, a))
	if next.Status != teamster.StatusOK || next.AssistantTexts[0] != "next" {
		t.Fatalf("the session's next turn %+v (error %v), want ok: the first turn left the session stranded", next, next.Error)
	}
}

// Events a harness reports after its run's context ended (a cancel) still go
// out, beyond the seq reservation the claim made: extending it does not use
// the cancelled context.
func TestEventsAfterACancelStillGoOut(t *testing.T) {
	f := edgeFleet(t, 1)
	h := submit(t, f.Client, edgeAttempt("late", "late-events"))
	events := h.Events()
	partials := 0
	timeout := time.After(wait)
	cancelled := false
	for done := false; !done; {
		select {
		case e, ok := <-events:
			if !ok {
				done = true
				break
			}
			switch e.Type {
			case bus.EventClaimed:
				if err := f.Client.Cancel(context.Background(), h.AttemptID(), "test"); err != nil {
					t.Fatalf("cancel: %v", err)
				}
				cancelled = true
			case bus.EventPartial:
				partials++
			}
		case <-timeout:
			t.Fatalf("the attempt did not end (%d partial events so far)", partials)
		}
	}
	res := result(t, h)
	if !cancelled || res.Error == nil || res.Error.Code != teamster.CodeCancelled {
		t.Fatalf("result %+v, want cancelled", res)
	}
	if partials != lateEvents {
		t.Fatalf("%d partial events after the cancel, want %d", partials, lateEvents)
	}
}

// A worker drained before it was started stops at once (no panic on a
// registry it never made), and cannot be started afterwards.
func TestDrainBeforeStartStops(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	nc := f.Connect("early")
	rdb := redis.NewClient(&redis.Options{Addr: f.Redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	w, err := worker.New(worker.Params{Config: worker.DevConfig("early", 4), NATS: nc, Redis: rdb, Logger: f.Log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Drain(ctx); err != nil {
		t.Fatalf("drain before start: %v", err)
	}
	select {
	case <-w.Done():
	default:
		t.Fatal("Done is not closed after a drain before start")
	}
	if st := worker.State(w); st != bus.WorkerStopped {
		t.Fatalf("state %s, want stopped", st)
	}
	if err := w.Start(ctx); err == nil {
		t.Fatal("Start after the drain succeeded")
	}
}

// A Resume that succeeds wins over the end of the drain it undoes, even when
// the last run ended at the same moment: the worker goes on fetching. Each
// round makes both happen before the drain looks (the drain has no runs to
// wait for, and the resume lands before it waits), so a drain that chose
// between them at random would stop the worker in some round.
func TestAResumeRacingTheEndOfTheDrainWins(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	w := f.Workers[0]
	var mu sync.Mutex
	var resumeErr error
	worker.SetBeforeDrainWait(w, func() {
		mu.Lock()
		defer mu.Unlock()
		resumeErr = worker.Resume(w)
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for round := 0; round < 24; round++ {
		err := w.Drain(ctx)
		mu.Lock()
		rerr := resumeErr
		mu.Unlock()
		if rerr != nil {
			t.Fatalf("round %d: resume: %v", round, rerr)
		}
		if !errors.Is(err, worker.ErrResumed) || worker.State(w) != bus.WorkerActive {
			t.Fatalf("round %d: drain %v, state %s, after a successful resume: want ErrResumed and active", round, err, worker.State(w))
		}
	}
	worker.SetBeforeDrainWait(w, nil)
	if r := result(t, submit(t, f.Client, fleettest.Attempt("after-resumes", "still here"))); r.Status != teamster.StatusOK {
		t.Fatalf("after the resumes: %+v", r)
	}
}

// An attempt that finished (its durable result exists) but whose record a
// Redis failover left queued at the head of its session's order holds the
// session's next turn only until a worker waiting behind it asks the
// results stream: the record is made to agree, and the next turn runs.
func TestATurnHeldBehindAFinishedAttemptRunsOnceTheRecordAgrees(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	store := leases.NewStore(f.RDB)
	// The ghost: accepted in Redis, never published (its message was
	// claimed and acknowledged on the primary that was lost), finished ok
	// in the results stream.
	ghost := fleettest.Attempt("held", "ghost")
	ghost.AttemptID = "ghost-1"
	if _, err := store.Accept(t.Context(), leases.AcceptArgs{SessionKey: ghost.SessionKey, AttemptID: ghost.AttemptID,
		Digest: "ghost", HarnessID: "codex", QueueTimeout: time.Hour, RunBudget: time.Minute, Reply: []byte(`{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	_, js := f.NATS.JetStream(t)
	res := &bus.Result{V: bus.Version, AttemptID: ghost.AttemptID, Status: teamster.StatusOK, HarnessID: "codex", WorkerID: "w-lost",
		AssistantTexts: []string{"done"}}
	body, err := bus.Encode(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.PublishResultBody(t.Context(), js, ghost.AttemptID, body); err != nil {
		t.Fatal(err)
	}

	h := submit(t, f.Client, fleettest.Attempt("held", "next turn"))
	if r := result(t, h); r.Status != teamster.StatusOK {
		t.Fatalf("the next turn: %+v, want ok", r)
	}
	rec, err := store.Attempt(t.Context(), ghost.SessionKey, ghost.AttemptID)
	if err != nil || rec.State != leases.StateFinished || rec.Outcome != leases.OutcomeOK {
		t.Fatalf("the ghost's record: %+v %v, want finished ok (the durable result's outcome)", rec, err)
	}
}
