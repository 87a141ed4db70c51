package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// Two test implementations: "plain", the scripted harness without its
// Finalizer (it cannot enforce a finalization, as Codex cannot: the worker
// refuses it any), and
// "greedy", whose finalization tries to call a tool and ask a question.
func init() {
	worker.RegisterImplementation("plain", func(m selection.Manifest, _ json.RawMessage, _ worker.FactoryEnv) (harness.Harness, error) {
		return plainHarness{scripted.New(m, scripted.Options{})}, nil
	})
	worker.RegisterImplementation("greedy", func(m selection.Manifest, _ json.RawMessage, _ worker.FactoryEnv) (harness.Harness, error) {
		return greedyHarness{scripted.New(m, scripted.Options{})}, nil
	})
}

type plainHarness struct{ s *scripted.Harness }

func (p plainHarness) Manifest() selection.Manifest           { return p.s.Manifest() }
func (p plainHarness) Supports(a *bus.Attempt) (bool, string) { return p.s.Supports(a) }
func (p plainHarness) RunAttempt(ctx context.Context, r *harness.Run) (*harness.Outcome, error) {
	return p.s.RunAttempt(ctx, r)
}

type greedyHarness struct{ *scripted.Harness }

func (g greedyHarness) FinalizeSettledTurn(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	// Long enough for the test to try steering it.
	if err := run.Host.Emit(ctx, bus.EventPartial, bus.PartialData{Text: "finalizing"}); err != nil {
		return nil, err
	}
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	_, toolErr := run.Host.Tool(ctx, bus.ToolCall{V: bus.Version, CallID: "c1", Name: "lookup"})
	_, askErr := run.Host.UserInput(ctx, bus.UserInput{V: bus.Version, Question: "?"})
	return &harness.Outcome{AssistantTexts: []string{"tool: " + errText(toolErr) + "; ask: " + errText(askErr)}}, nil
}

func errText(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}

// finalization is the settled-turn finalization of session s.
func finalization(s string) *bus.Attempt {
	a := fleettest.Attempt(s, "The previous assistant turn completed its tool calls but did not produce a user-visible answer.")
	a.Operation = bus.OperationSettledToolFinalization
	a.ToolsAllow = &[]string{}
	return a
}

// A tool-only turn, then its settled-turn finalization as a fleet
// operation: it runs in the session's order on the same native thread, one
// turn on, with no steering; a harness that cannot enforce it refuses it at
// once with nothing done; a harness that tries is refused tools and
// questions by the worker.
func TestSettledTurnFinalization(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1, WorkerConfig: func(id string, slots int) *worker.Config {
		c := worker.DevConfig(id, slots)
		for _, impl := range []string{"plain", "greedy"} {
			c.Harnesses = append(c.Harnesses, worker.HarnessConfig{Implementation: impl, Manifest: selection.Manifest{
				ID: impl, PluginID: impl, Injection: selection.InjectionV2, AutoSelection: &selection.AutoSelection{ProviderIDs: []string{}}}})
		}
		return c
	}})
	tools := newAsserter()
	srv, err := f.Client.ServeHost("gw-final", tools)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	const s = "final:alice"
	turn := fleettest.Attempt(s, fleettest.Script(`{"tool":{"name":"lookup","quiet":true}}`))
	turn.HostID = "gw-final"
	r1 := result(t, submit(t, f, turn))
	if r1.Status != teamster.StatusOK || len(r1.AssistantTexts) != 0 {
		t.Fatalf("tool-only turn %+v", r1)
	}
	r2 := result(t, submit(t, f, finalization(s)))
	want := "finalized (thread scripted-sid-" + s + ", turn 2): The previous assistant turn completed its tool calls but did not produce a user-visible answer."
	if r2.Status != teamster.StatusOK || len(r2.AssistantTexts) != 1 || r2.AssistantTexts[0] != want {
		t.Fatalf("finalization %+v, want the text %q", r2, want)
	}
	if string(r2.NativeSession) != `{"thread":"scripted-sid-`+s+`","turns":2}` {
		t.Fatalf("the finalization's binding %s: not the same thread one turn on", r2.NativeSession)
	}

	// A harness that cannot enforce it: refused at once, nothing done.
	plain := finalization("final:bob")
	plain.AgentHarnessID = "plain"
	plain.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"plain"}}, RequestTransportOverrides: "none"}
	r3 := result(t, submit(t, f, plain))
	if r3.Error == nil || r3.Error.Code != teamster.CodeHarnessUnsupportedRoute || r3.Error.SideEffects != teamster.SideEffectsNone ||
		!strings.Contains(r3.Error.Message, "cannot run a settled-turn finalization") {
		t.Fatalf("finalization on a harness without a Finalizer: %+v", r3.Error)
	}

	// A finalizer that tries tools and questions: the worker refuses both,
	// and it takes no steering.
	greedy := finalization("final:carol")
	greedy.AgentHarnessID = "greedy"
	greedy.HostID = "gw-final"
	greedy.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"greedy"}}, RequestTransportOverrides: "none"}
	h := submit(t, f, greedy)
	waitEvent(t, h, bus.EventPartial)
	if _, err := f.Client.Inject(t.Context(), bus.InjectRequest{AttemptID: h.AttemptID(), Text: "more", AuthorityKind: bus.AuthorityRun}); !errors.Is(err, teamster.ErrInvalidRequest) {
		t.Fatalf("steering a finalization: %v, want invalid_request", err)
	}
	r4 := result(t, h)
	if r4.Status != teamster.StatusOK || len(r4.AssistantTexts) != 1 ||
		!strings.Contains(r4.AssistantTexts[0], "tool: invalid_request: a settled-turn finalization has no tools") ||
		!strings.Contains(r4.AssistantTexts[0], "ask: invalid_request: a settled-turn finalization asks no questions") {
		t.Fatalf("greedy finalization %+v", r4)
	}
}
