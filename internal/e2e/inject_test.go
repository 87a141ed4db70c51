package e2e

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
)

// awaitScript says "waiting", then waits up to 30 s for injected input.
var awaitScript = fleettest.Script(`{"say":"waiting"}`, `{"awaitInjection":30000}`, `{"say":"done"}`)

// injectionEvents collects the injection events of a handle until its result.
func injectionEvents(t *testing.T, h *client.Handle) []bus.InjectionData {
	t.Helper()
	var out []bus.InjectionData
	for e := range h.Events() {
		if e.Type == bus.EventInjection {
			var d bus.InjectionData
			mustJSON(t, e.Data, &d)
			out = append(out, d)
		}
	}
	return out
}

func states(evs []bus.InjectionData, id string) []string {
	var s []string
	for _, e := range evs {
		if e.InjectionID == id {
			s = append(s, e.State+codeSuffix(e.Code))
		}
	}
	return s
}

func codeSuffix(c teamster.Code) string {
	if c == "" {
		return ""
	}
	return ":" + string(c)
}

// Run input reaches a running scripted turn and appears in its result;
// source-bound input with the current generation is delivered; the events
// show each item admitted and committed.
func TestInjectReachesTheRunningTurn(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	const s = "inject:alice"
	h := submit(t, f, fleettest.Attempt(s, awaitScript))
	waitEvent(t, h, bus.EventPartial) // the run is waiting for input
	rep, err := f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: s, Text: "also, be brief", AuthorityKind: bus.AuthorityRun})
	if err != nil || rep.Status != bus.StatusAccepted || rep.AttemptID != h.AttemptID() || rep.InjectionID == "" {
		t.Fatalf("inject: %+v %v", rep, err)
	}
	evs := injectionEvents(t, h)
	r := result(t, h)
	if !slices.Contains(r.AssistantTexts, "also, be brief") {
		t.Fatalf("result texts %q lack the injected input", r.AssistantTexts)
	}
	if got := states(evs, rep.InjectionID); !slices.Equal(got, []string{"accepted", "committed"}) {
		t.Fatalf("injection events %v, want accepted then committed", got)
	}

	// Source-bound input with the source's current generation.
	if err := f.Client.GrantSource(t.Context(), "telegram-chat-7", 3); err != nil {
		t.Fatal(err)
	}
	h2 := submit(t, f, fleettest.Attempt(s, awaitScript))
	waitEvent(t, h2, bus.EventPartial)
	rep, err = f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: s, Text: "from the chat", AuthorityKind: bus.AuthoritySourceBound,
		Source: &bus.SourceRef{ID: "telegram-chat-7", Generation: 3}})
	if err != nil {
		t.Fatalf("source-bound inject: %v", err)
	}
	evs = injectionEvents(t, h2)
	if r := result(t, h2); !slices.Contains(r.AssistantTexts, "from the chat") {
		t.Fatalf("result texts %q lack the source-bound input", r.AssistantTexts)
	}
	if got := states(evs, rep.InjectionID); !slices.Equal(got, []string{"accepted", "committed"}) {
		t.Fatalf("injection events %v", got)
	}
}

// A revoke that lands after the inject was accepted and before the harness
// dispatches it drops that item with source_revoked; the harness never sees
// it, and other input is unaffected.
func TestRevokeBeforeDispatchDropsTheItem(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	const s = "inject:bob"
	if err := f.Client.GrantSource(t.Context(), "voice-line-1", 1); err != nil {
		t.Fatal(err)
	}
	// The harness queues input at once but dispatches it only after the sleep.
	h := submit(t, f, fleettest.Attempt(s, fleettest.Script(`{"say":"listening"}`, `{"sleep":1500}`, `{"awaitInjection":100}`)))
	waitEvent(t, h, bus.EventPartial)
	bound, err := f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: s, Text: "revoked words", AuthorityKind: bus.AuthoritySourceBound,
		Source: &bus.SourceRef{ID: "voice-line-1", Generation: 1}})
	if err != nil {
		t.Fatalf("inject: %v", err)
	}
	plain, err := f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: s, Text: "plain words", AuthorityKind: bus.AuthorityRun})
	if err != nil {
		t.Fatalf("inject: %v", err)
	}
	if err := f.Client.RevokeSource(t.Context(), "voice-line-1"); err != nil {
		t.Fatal(err)
	}
	evs := injectionEvents(t, h)
	r := result(t, h)
	if slices.Contains(r.AssistantTexts, "revoked words") {
		t.Fatalf("the harness dispatched revoked input: %q", r.AssistantTexts)
	}
	if !slices.Contains(r.AssistantTexts, "plain words") {
		t.Fatalf("the revoke dropped unrelated input: %q", r.AssistantTexts)
	}
	if got := states(evs, bound.InjectionID); !slices.Equal(got, []string{"accepted", "rejected:source_revoked"}) {
		t.Fatalf("revoked item events %v, want accepted then rejected:source_revoked", got)
	}
	if got := states(evs, plain.InjectionID); !slices.Equal(got, []string{"accepted", "committed"}) {
		t.Fatalf("plain item events %v", got)
	}
	// A revoked generation can never be granted again.
	if err := f.Client.GrantSource(t.Context(), "voice-line-1", 1); !errors.Is(err, teamster.ErrInvalidRequest) {
		t.Fatalf("re-grant of a revoked generation: %v", err)
	}
}

// Source-bound input to a V1-only harness is injection_requires_v2 before
// any queue; inject with no running turn is no_active_run; inject into a run
// whose lease was lost is rejected.
func TestInjectRefusals(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	if err := f.Client.GrantSource(t.Context(), "src", 1); err != nil {
		t.Fatal(err)
	}
	v1 := fleettest.Attempt("inject:v1", awaitScript)
	v1.Provider, v1.ModelID = "anthropic", "claude-opus-5"
	v1.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"claude-cli"}}}
	h := submit(t, f, v1)
	waitEvent(t, h, bus.EventPartial)
	_, err := f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: "inject:v1", Text: "bound", AuthorityKind: bus.AuthoritySourceBound,
		Source: &bus.SourceRef{ID: "src", Generation: 1}})
	if !errors.Is(err, teamster.ErrInjectionRequiresV2) {
		t.Fatalf("source-bound to V1: %v, want injection_requires_v2", err)
	}
	// Run input to the V1 harness is fine.
	if _, err := f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: "inject:v1", Text: "plain", AuthorityKind: bus.AuthorityRun}); err != nil {
		t.Fatalf("run input to V1: %v", err)
	}
	if r := result(t, h); slices.Contains(r.AssistantTexts, "bound") || !slices.Contains(r.AssistantTexts, "plain") {
		t.Fatalf("V1 result texts %q", r.AssistantTexts)
	}

	if _, err := f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: "inject:nobody", Text: "hello?"}); !errors.Is(err, teamster.ErrNoActiveRun) {
		t.Fatalf("no running turn: %v, want no_active_run", err)
	}

	// Lease lost: Redis paused under the run; the inject goes by attempt id
	// and is refused: by the worker (its lease is gone), or by the router,
	// which reads the attempt's worker from Redis to relay the inject and
	// answers internal while Redis does not answer.
	lost := submit(t, f, fleettest.Attempt("inject:lost", awaitScript))
	waitEvent(t, lost, bus.EventPartial)
	if err := f.Redis.Pause(); err != nil {
		t.Fatal(err)
	}
	defer f.Redis.Resume()
	waitLedger(t, f, lost.AttemptID(), scripted.EventEnd)
	_, err = f.Client.Inject(t.Context(), bus.InjectRequest{AttemptID: lost.AttemptID(), Text: "too late"})
	if !errors.Is(err, teamster.ErrLeaseLost) && !errors.Is(err, teamster.ErrNoActiveRun) && !errors.Is(err, teamster.ErrInternal) {
		t.Fatalf("inject into a run whose lease was lost: %v, want it rejected", err)
	}
	// Every other request the router answers from Redis gets a typed
	// answer too, before the gateway's own timeout: internal, not silence.
	// (9 s here, under the client's default 10 s: the router's budget is 7 s.)
	ctx, cancel := context.WithTimeout(t.Context(), 9*time.Second)
	defer cancel()
	if err := f.Client.GrantSource(ctx, "src-paused", 1); !errors.Is(err, teamster.ErrInternal) {
		t.Fatalf("source grant with Redis paused: %v, want internal", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 9*time.Second)
	defer cancel()
	if err := f.Client.SessionOp(ctx, leases.OpReset, bus.SessionOp{SessionKey: "inject:lost"}); !errors.Is(err, teamster.ErrInternal) {
		t.Fatalf("session reset with Redis paused: %v, want internal", err)
	}
}

// Injection follows the session: as its turns move between workers, each
// inject reaches whichever worker runs the current turn.
func TestInjectionFollowsTheSession(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	const s = "inject:moving"
	seen := map[string]bool{}
	for turn := 0; turn < 2; turn++ {
		h := submit(t, f, fleettest.Attempt(s, awaitScript))
		var cd bus.ClaimedData
		mustJSON(t, waitEvent(t, h, bus.EventClaimed).Data, &cd)
		waitEvent(t, h, bus.EventPartial)
		if _, err := f.Client.Inject(t.Context(), bus.InjectRequest{SessionKey: s, Text: "steer"}); err != nil {
			t.Fatalf("turn %d inject: %v", turn, err)
		}
		r := result(t, h)
		if !slices.Contains(r.AssistantTexts, "steer") || r.WorkerID != cd.WorkerID {
			t.Fatalf("turn %d: %+v", turn, r)
		}
		seen[r.WorkerID] = true
		// Move the session: drain the worker that ran this turn.
		if turn == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			if err := f.Worker(r.WorkerID).Drain(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
		}
	}
	if len(seen) != 2 {
		t.Fatalf("the turns ran on %v; want two workers", seen)
	}
}
