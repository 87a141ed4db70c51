package claude_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/claude"
	"github.com/teamster-fleet/teamster/harness/claude/claudetest"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// A session's next turn resumes its Claude session on another worker whose
// HOME it never used: the worker that ran the first turn saved the transcript
// to the object store TEAMSTER_NATIVE_STATE, the fenced finish named it in
// the session record, and the second worker restored it before the turn.
// The endpoint sees the first turn's history in the second turn's request.
func TestResumeOnAnotherWorkerWithAnotherHome(t *testing.T) {
	e := claudetest.NewEndpoint(t,
		claudetest.Reply{Text: "Nice to meet you, Ada", OutputTokens: 3},
		claudetest.Reply{Text: "Your name is Ada", OutputTokens: 4},
	)
	t.Setenv(claudetest.KeyEnv, secretKey)
	binary := claudetest.Binary(t)
	var mu sync.Mutex
	homes := map[string]string{}
	cwd := t.TempDir()
	f := fleettest.Start(t, fleettest.Options{Workers: 2, WorkerConfig: func(id string, slots int) *worker.Config {
		home := t.TempDir()
		mu.Lock()
		homes[id] = home
		mu.Unlock()
		s, _ := json.Marshal(claude.Settings{Binary: binary, Home: home, Cwd: cwd, BaseURL: e.BaseURL(), APIKeyEnv: claudetest.KeyEnv})
		return &worker.Config{WorkerID: id, Slots: slots, Harnesses: []worker.HarnessConfig{{Implementation: "claude", Settings: s, Manifest: manifest}}}
	}})
	const key = "agent:main:claude-fleet"
	a := func(prompt string) *bus.Attempt {
		a := fleettest.Attempt(key, prompt)
		a.Provider, a.ModelID = "anthropic", claudetest.Model
		a.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{manifest.ID}}, RequestTransportOverrides: "none"}
		return a
	}
	r1 := fleettest.Result(t, fleettest.Submit(t, f.Client, a("my name is Ada")))
	if r1.Status != teamster.StatusOK {
		t.Fatalf("turn 1: %+v (error %v)", r1, r1.Error)
	}
	rec, err := leases.NewStore(f.RDB).Session(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if want := bus.StateObjectName(leases.Tag(key), r1.Fence); rec.NativeState != want {
		t.Fatalf("the record names native state %q, want turn 1's %q", rec.NativeState, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), fleettest.WaitTimeout)
	defer cancel()
	if err := f.Worker(r1.WorkerID).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := fleettest.Result(t, fleettest.Submit(t, f.Client, a("what is my name?")))
	if r2.Status != teamster.StatusOK || r2.WorkerID == r1.WorkerID {
		t.Fatalf("turn 2: %+v (error %v), want ok on the other worker than %s", r2, r2.Error, r1.WorkerID)
	}
	if string(r2.NativeSession) != string(r1.NativeSession) {
		t.Fatalf("turn 2 is bound to %s, want turn 1's %s", r2.NativeSession, r1.NativeSession)
	}
	if !slices.Equal(r2.AssistantTexts, []string{"Your name is Ada"}) {
		for i, rq := range e.Requests() {
			t.Logf("request %d: %q", i+1, rq.Texts())
		}
		t.Fatalf("turn 2 texts %q, turn 1 texts %q", r2.AssistantTexts, r1.AssistantTexts)
	}
	reqs := e.WaitRequests(t, 2)
	for _, s := range []string{"my name is Ada", "Nice to meet you, Ada", "what is my name?"} {
		if !reqs[1].Has(s) {
			t.Errorf("turn 2's request lacks %q: the transcript was not restored; its texts: %q", s, reqs[1].Texts())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if homes[r1.WorkerID] == homes[r2.WorkerID] {
		t.Fatal("the two workers shared a HOME; the test tested nothing")
	}
}
