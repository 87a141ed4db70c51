package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// shortDuplicateWindow sets TEAMSTER_ATTEMPTS's duplicate window to d, so
// that a test can resubmit past it (the contract's is 2 minutes).
func shortDuplicateWindow(t *testing.T, f *fleettest.Fleet, d time.Duration) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(f.Connect("stream-admin"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := bus.AttemptsStreamConfig(bus.StreamOptions{})
	cfg.Duplicates = d
	if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return js
}

// pendingOn is the number of messages waiting on harness's attempt subject.
func pendingOn(t *testing.T, js jetstream.JetStream, harness string) uint64 {
	t.Helper()
	subj, err := bus.AttemptSubject(harness)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), bus.StreamAttempts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

// runsOf counts the ledger's run starts of attempt, by worker fence.
func runsOf(l *scripted.MemoryLedger, attempt string) int {
	n := 0
	for _, e := range l.Entries() {
		if e.Attempt == attempt && e.Event == scripted.EventStart {
			n++
		}
	}
	return n
}

// An attempt id is bound to the attempt first accepted under it. Queued
// behind a long turn past JetStream's duplicate window, a resubmit with the
// same id and a different prompt and pin is refused and changes nothing; the
// identical resubmit is answered from the record and leaves a second copy of
// the message; a stray copy on another harness's subject is dropped by the
// claim; and the attempt runs once, with its original prompt, on its
// original harness.
func TestAResubmitIsBoundToWhatWasAccepted(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	js := shortDuplicateWindow(t, f, time.Second)

	long := fleettest.Attempt("bound", fleettest.Script(`{"sleep":4000}`))
	submit(t, f, long)
	orig := fleettest.Attempt("bound", "original")
	orig.AttemptID = "bound-1"
	h := submit(t, f, orig)
	if h.Reply.HarnessID != "codex" {
		t.Fatalf("accepted for %s, want codex", h.Reply.HarnessID)
	}
	time.Sleep(1500 * time.Millisecond) // past the duplicate window

	changed := *orig
	changed.Prompt = "changed"
	changed.AgentHarnessID = "claude-cli"
	changed.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"claude-cli"}}, RequestTransportOverrides: "none"}
	promptOnly := *orig
	promptOnly.Prompt = "changed"
	for name, a := range map[string]*bus.Attempt{"prompt and pin": &changed, "prompt": &promptOnly} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rh, err := f.Client.Submit(ctx, a)
		cancel()
		if !errors.Is(err, teamster.ErrInvalidRequest) {
			t.Fatalf("resubmit with another %s: %v (handle %v), want invalid_request", name, err, rh != nil)
		}
	}

	// The identical attempt is answered from the record, and, past the
	// duplicate window, published again: a second, identical copy of the
	// queued attempt waits on codex's subject beside the first.
	same := *orig
	hs := submit(t, f, &same)
	if hs.Reply.HarnessID != "codex" || !cmp.Equal(hs.Reply.Selection, h.Reply.Selection) {
		t.Fatalf("identical resubmit answered %+v, want the first reply %+v", hs.Reply, h.Reply)
	}

	if n := pendingOn(t, js, "codex"); n != 2 {
		t.Fatalf("%d messages on codex's subject after the identical resubmit, want 2 (the attempt and its copy)", n)
	}
	time.Sleep(1500 * time.Millisecond) // past the window of that publish

	// A stray copy of the attempt, changed, on the other harness's subject
	// (what a router that republished the new body to the new selection
	// would leave): the claim drops it.
	stray := changed
	stray.ReplyTo = "_INBOX.stray"
	body, err := bus.Encode(&stray)
	if err != nil {
		t.Fatal(err)
	}
	if dup, err := bus.PublishAttemptBody(context.Background(), js, "claude-cli", orig.AttemptID, body, nil); err != nil || dup {
		t.Fatalf("publish the stray copy: duplicate %v, %v", dup, err)
	}

	res := result(t, h)
	if res.Status != teamster.StatusOK || res.HarnessID != "codex" || !cmp.Equal(res.AssistantTexts, []string{"original"}) {
		t.Fatalf("result %+v, want ok from codex echoing the original prompt", res)
	}
	// The stray copy is given time to be claimed (it was not) after the run.
	time.Sleep(time.Second)
	if n := runsOf(f.Ledger, orig.AttemptID); n != 1 {
		t.Fatalf("the attempt ran %d times, want once", n)
	}
	if durable, err := f.Client.Result(context.Background(), orig.AttemptID); err != nil || durable.HarnessID != "codex" ||
		!cmp.Equal(durable.AssistantTexts, []string{"original"}) {
		t.Fatalf("durable result %+v %v", durable, err)
	}
}

// A resubmit of an accepted attempt is answered from its record even when
// the fleet would refuse it now: here the only worker hosting its harness
// left the registry while it was queued.
func TestAResubmitIsAnsweredFromTheRecordWhenSelectionWouldRefuseIt(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2, WorkerConfig: func(id string, slots int) *worker.Config {
		cfg := worker.DevConfig(id, slots)
		if id == "w2" {
			cfg.Harnesses = append(cfg.Harnesses, worker.HarnessConfig{Implementation: "scripted", Manifest: selection.Manifest{
				ID: "solo", Label: "Solo", PluginID: "solo", Injection: selection.InjectionNone}})
		}
		return cfg
	}})
	submit(t, f, fleettest.Attempt("solo", fleettest.Script(`{"sleep":3000}`)))
	a := fleettest.Attempt("solo", "queued")
	a.AttemptID = "solo-1"
	a.AgentHarnessID = "solo"
	a.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"solo"}}, RequestTransportOverrides: "none"}
	a.QueueTimeoutMs = 6000
	h := submit(t, f, a)
	if h.Reply.HarnessID != "solo" {
		t.Fatalf("accepted for %s, want solo", h.Reply.HarnessID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Worker("w2").Drain(ctx); err != nil {
		t.Fatalf("drain w2: %v", err)
	}
	// The router no longer sees solo: a fresh attempt for it is refused.
	fresh := *a
	fresh.AttemptID = ""
	fresh.SessionKey = "solo-other"
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := f.Client.Submit(ctx, &fresh)
		if errors.Is(err, teamster.ErrHarnessNotRegistered) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a fresh attempt for solo after w2 left: %v, want harness_not_registered", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	again := *a
	hs := submit(t, f, &again)
	if hs.Reply.HarnessID != "solo" || !cmp.Equal(hs.Reply.Selection, h.Reply.Selection) {
		t.Fatalf("resubmit answered %+v, want the first reply %+v", hs.Reply, h.Reply)
	}
	other := *a
	other.Prompt = "something else"
	if _, err := f.Client.Submit(ctx, &other); !errors.Is(err, teamster.ErrInvalidRequest) {
		t.Fatalf("another attempt under the id while selection refuses: %v, want invalid_request", err)
	}
	// Nobody hosts solo any more: the attempt ends with its queue timeout,
	// once.
	if res := result(t, h); res.Error == nil || res.Error.Code != teamster.CodeQueueTimeout {
		t.Fatalf("result %+v, want queue_timeout", res)
	}
}
