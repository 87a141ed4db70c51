package claude_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/claude"
	"github.com/teamster-fleet/teamster/harness/claude/claudetest"
	"github.com/teamster-fleet/teamster/injection"
)

// A gateway tool round trip through the turn's MCP server: the model calls
// the tool, the host's tool callback gets the arguments, the terminal
// outcome is reported, and the result reaches the model.
func TestGatewayToolRoundTrip(t *testing.T) {
	e := claudetest.NewEndpoint(t,
		claudetest.Reply{Call: &claudetest.Call{Name: "lookup", Args: map[string]any{"q": "meaning"}}, OutputTokens: 3},
		claudetest.Reply{Text: "The answer is 42", OutputTokens: 4},
	)
	r := newRig(t, e, nil)
	host := &recHost{toolResult: json.RawMessage(`{"answer":42}`)}
	a := attempt("agent:main:tools", "look up the meaning")
	a.Tools = []bus.Tool{
		{Name: "lookup", Description: "Looks something up", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)},
		{Name: "forbidden", Description: "Not allowed this turn"},
	}
	a.ToolsAllow = &[]string{"lookup"}
	out, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: a, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.AssistantTexts, []string{"The answer is 42"}) {
		t.Fatalf("texts %q", out.AssistantTexts)
	}
	reqs := e.WaitRequests(t, 2)
	if tools := reqs[0].Tools(); !slices.Equal(tools, []string{"mcp__teamster__lookup"}) {
		t.Fatalf("the model was offered %v, want only the allowed gateway tool", tools)
	}
	if got := reqs[1].ToolResult(); !strings.Contains(got, `"answer":42`) {
		t.Fatalf("the model was told %q", got)
	}
	evs, calls, terms, usage := host.snapshot()
	if len(calls) != 1 || calls[0].Name != "lookup" || string(calls[0].Args) != `{"q":"meaning"}` {
		t.Fatalf("tool calls %+v", calls)
	}
	if !strings.HasPrefix(calls[0].CallID, "toolu_") {
		t.Fatalf("call id %q, want the model's tool_use id", calls[0].CallID)
	}
	if len(terms) != 1 || terms[0].CallID != calls[0].CallID || terms[0].Outcome != bus.OutcomeSuccess || !terms[0].ExecutionStarted {
		t.Fatalf("terminal reports %+v", terms)
	}
	var toolEvents []bus.ToolData
	for _, ev := range evs {
		if ev.Type == bus.EventTool {
			var d bus.ToolData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			toolEvents = append(toolEvents, d)
		}
	}
	if len(toolEvents) != 1 || toolEvents[0].Outcome != bus.OutcomeSuccess || string(toolEvents[0].Result) != `{"answer":42}` {
		t.Fatalf("tool events %+v", toolEvents)
	}
	var total int64
	for _, u := range usage {
		total += u.Tokens
	}
	if len(usage) != 2 || total != 7 {
		t.Fatalf("usage %+v, want one report per response, 7 tokens", usage)
	}
}

// A tool the host refuses: the model is told, the terminal report says
// failure, and the host's last tool error is in the outcome.
func TestFailedToolKeepsTheHostsLastToolError(t *testing.T) {
	e := claudetest.NewEndpoint(t,
		claudetest.Reply{Call: &claudetest.Call{Name: "lookup", Args: map[string]any{"q": "x"}}},
		claudetest.Reply{Text: "The lookup failed"},
	)
	r := newRig(t, e, nil)
	host := &recHost{toolErr: teamster.Errorf(teamster.CodeHarnessFailed, "the lookup service is down")}
	a := attempt("agent:main:toolfail", "look it up")
	a.Tools = []bus.Tool{{Name: "lookup"}}
	out, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: a, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.LastToolError), "the lookup service is down") {
		t.Fatalf("lastToolError %s", out.LastToolError)
	}
	_, _, terms, _ := host.snapshot()
	if len(terms) != 1 || terms[0].Outcome != bus.OutcomeFailure || !terms[0].ExecutionStarted {
		t.Fatalf("terminal reports %+v", terms)
	}
	if reqs := e.WaitRequests(t, 2); !strings.Contains(reqs[1].ToolResult(), "the tool failed: the lookup service is down") {
		t.Fatalf("the model was told %q", reqs[1].ToolResult())
	}
}

// settlements records a queued input's admission and settlements.
type settlements struct {
	mu       sync.Mutex
	accepted int
	settled  []injection.Settlement
}

func (s *settlements) opts() injection.QueueOptions {
	return injection.QueueOptions{
		OnQueueAccepted: func(bool) { s.mu.Lock(); s.accepted++; s.mu.Unlock() },
		OnQueueSettled:  func(st injection.Settlement) { s.mu.Lock(); s.settled = append(s.settled, st); s.mu.Unlock() },
	}
}

func (s *settlements) get() (int, []injection.Settlement) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, append([]injection.Settlement(nil), s.settled...)
}

// started runs the attempt in the background once the endpoint is ready and
// returns its outcome channel and the process's pid.
type background struct {
	done chan struct{}
	out  *harness.Outcome
	err  error
	pid  chan int
}

func runInBackground(t *testing.T, r *rig, ctx context.Context, run *harness.Run) *background {
	t.Helper()
	b := &background{done: make(chan struct{}), pid: make(chan int, 1)}
	claude.OnStart(r.h, func(_ string, pid int) { b.pid <- pid })
	go func() {
		defer close(b.done)
		b.out, b.err = r.h.RunAttempt(ctx, run)
	}()
	return b
}

func (b *background) wait(t *testing.T) (*harness.Outcome, error) {
	t.Helper()
	select {
	case <-b.done:
		return b.out, b.err
	case <-time.After(120 * time.Second):
		t.Fatal("the turn did not end")
		return nil, nil
	}
}

// waitInjector waits for the run's injection handle.
func waitInjector(t *testing.T, run *harness.Run) injection.V2 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if h, ok := run.Injector().(injection.V2); ok {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the run installed no V2 handle")
	return nil
}

// Steering: input injected while the model is answering reaches the same
// turn's next request; source-bound input whose assertion fails is refused
// before anything is written; each item settles once.
func TestSteerReachesTheRunningTurn(t *testing.T) {
	e := claudetest.NewEndpoint(t,
		claudetest.Reply{Text: "The sun is a star", Hold: true},
		claudetest.Reply{Text: "The moon is not", OutputTokens: 2},
	)
	r := newRig(t, e, nil)
	host := &recHost{}
	run := &harness.Run{Attempt: attempt("agent:main:steer", "tell me about the sun"), Host: host}
	b := runInBackground(t, r, t.Context(), run)
	h := waitInjector(t, run)
	e.WaitRequests(t, 1)

	var revoked settlements
	err := h.QueueMessage("REVOKED INPUT", revoked.opts(), func() bool { return false }, injection.KindSourceBound)
	if teamster.CodeOf(err) != teamster.CodeSourceRevoked {
		t.Fatalf("revoked source-bound input: %v, want source_revoked", err)
	}
	var ok settlements
	if err := h.QueueMessage("INJECTED: mention the moon too", ok.opts(), func() bool { return true }, injection.KindRun); err != nil {
		t.Fatal(err)
	}
	e.Release()
	out, err := b.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.AssistantTexts, []string{"The sun is a star", "The moon is not"}) {
		t.Fatalf("texts %q", out.AssistantTexts)
	}
	reqs := e.WaitRequests(t, 2)
	if len(reqs) != 2 || !reqs[1].Has("INJECTED: mention the moon too") || reqs[1].Has("REVOKED INPUT") || reqs[0].Has("INJECTED") {
		t.Fatalf("%d requests; the second's texts: %q", len(reqs), reqs[len(reqs)-1].Texts())
	}
	if acc, st := revoked.get(); acc != 0 || !slices.Equal(st, []injection.Settlement{injection.Rejected}) {
		t.Fatalf("revoked input: accepted %d, settled %v", acc, st)
	}
	if acc, st := ok.get(); acc != 1 || !slices.Equal(st, []injection.Settlement{injection.Committed}) {
		t.Fatalf("steered input: accepted %d, settled %v", acc, st)
	}
	var late settlements
	if err := h.QueueMessage("too late", late.opts(), func() bool { return true }, injection.KindRun); teamster.CodeOf(err) != teamster.CodeNoActiveRun {
		t.Fatalf("input after the turn: %v, want no_active_run", err)
	}
	if _, _, _, usage := host.snapshot(); len(usage) != 2 {
		t.Fatalf("usage reports %+v, want one per response", usage)
	}
}

// Cancel: the CLI gets the interrupt, abandons the request in flight, and
// the turn ends with the context's cause.
func TestCancelInterruptsTheTurn(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Hold: true, HoldFor: 90 * time.Second})
	r := newRig(t, e, nil)
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	run := &harness.Run{Attempt: attempt("agent:main:cancel", "write a long essay"), Host: &recHost{}}
	b := runInBackground(t, r, ctx, run)
	pid := <-b.pid
	e.WaitRequests(t, 1)
	cancel(teamster.Errorf(teamster.CodeCancelled, "the user pressed stop"))
	_, err := b.wait(t)
	if e := teamster.AsError(err); e == nil || e.Code != teamster.CodeCancelled || !strings.Contains(e.Message, "pressed stop") {
		t.Fatalf("error %v, want the context's cause", err)
	}
	e.WaitAborted(t, 0)
	if alive(pid) {
		t.Fatalf("the claude process %d is still running", pid)
	}
	if !strings.Contains(r.logs.String(), "interrupting the turn") {
		t.Fatal("the turn was not interrupted")
	}
}

// A CLI killed mid-turn fails the turn harness_failed, sideEffects
// possible, and the turn is not replayed.
func TestKilledProcessFailsTheTurn(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Hold: true, HoldFor: 90 * time.Second}, claudetest.Reply{Text: "replayed!"})
	r := newRig(t, e, nil)
	run := &harness.Run{Attempt: attempt("agent:main:kill", "turn to be killed"), Host: &recHost{}}
	b := runInBackground(t, r, t.Context(), run)
	pid := <-b.pid
	e.WaitRequests(t, 1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err := b.wait(t)
	if e := wantCode(t, err, teamster.CodeHarnessFailed, teamster.SideEffectsPossible); !strings.Contains(e.Message, "exited during the turn") {
		t.Fatalf("error %q", e.Message)
	}
	if n := len(e.Requests()); n != 1 {
		t.Fatalf("the endpoint got %d turn requests, want exactly the killed one", n)
	}
}

func alive(pid int) bool {
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// A minimum version above the installed one is refused before anything
// starts, naming both versions.
func TestMinimumVersionIsEnforced(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Text: "never"})
	r := newRig(t, e, func(s *claude.Settings) { s.MinVersion = "99.0.0" })
	_, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: attempt("agent:main:version", "hello"), Host: &recHost{}})
	te := wantCode(t, err, teamster.CodeHarnessFailed, teamster.SideEffectsNone)
	for _, s := range []string{claude.PinnedVersion, "older than the minimum version 99.0.0"} {
		if !strings.Contains(te.Message, s) {
			t.Fatalf("error %q does not say %q", te.Message, s)
		}
	}
	if n := len(e.Requests()) + len(e.Others()); n != 0 {
		t.Fatalf("the endpoint got %d requests", n)
	}
}

// A run whose lease is no longer current when the prompt would be written
// writes nothing: lease_lost with no side effects.
func TestNoPromptOnceTheLeaseIsNotCurrent(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Text: "never"})
	r := newRig(t, e, nil)
	checks := 0
	run := &harness.Run{Attempt: attempt("agent:main:paused", "hello"), Host: &recHost{}, Current: func() bool { checks++; return checks == 1 }}
	_, err := r.h.RunAttempt(t.Context(), run)
	wantCode(t, err, teamster.CodeLeaseLost, teamster.SideEffectsNone)
	if n := len(e.Requests()); n != 0 {
		t.Fatalf("the endpoint got %d requests", n)
	}
}

// Auth profiles: the attempt's authProfileRef picks the worker variable the
// key comes from; an unknown profile, or an unset variable, fails before
// anything starts, naming the variable but never a key.
func TestAuthProfiles(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Text: "hi, team a"}, claudetest.Reply{Text: "hi, gateway a"})
	const keyA = "sk-ant-team-a-SECRET-77"
	t.Setenv("TEAMSTER_TEST_KEY_A", keyA)
	r := newRig(t, e, func(s *claude.Settings) {
		s.AuthProfiles = map[string]claude.AuthProfile{"team-a": {APIKeyEnv: "TEAMSTER_TEST_KEY_A"}, "team-b": {APIKeyEnv: "TEAMSTER_TEST_KEY_UNSET"},
			"gw-a": {APIKeyEnv: "TEAMSTER_TEST_KEY_A", Gateways: []string{"gateway-a"}}}
	})
	a := attempt("agent:main:auth", "hello")
	a.AuthProfileRef = "team-a"
	host := &recHost{}
	out, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: a, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	if reqs := e.WaitRequests(t, 1); reqs[0].APIKey != keyA {
		t.Fatalf("the endpoint got another key than team a's")
	}
	evs, _, _, _ := host.snapshot()
	noSecret(t, r, evs, out)
	if strings.Contains(r.logs.String(), keyA) {
		t.Fatal("a log line contains team a's key")
	}
	// A profile bound to a gateway serves that gateway's attempts only: to
	// any other, and to the unnamed tenant, it is not configured; a
	// gateway cannot name a profile bound to none.
	for _, c := range []struct{ tenant, ref, want string }{
		{"", "team-c", "not configured"}, {"", "team-b", "TEAMSTER_TEST_KEY_UNSET"},
		{"gateway-b", "gw-a", "not configured"}, {"", "gw-a", "not configured"}, {"gateway-a", "team-a", "not configured"},
	} {
		ref, want := c.ref, c.want
		a := attempt("agent:main:auth-"+ref+c.tenant, "hello")
		a.AuthProfileRef, a.Tenant = ref, c.tenant
		_, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: a, Host: &recHost{}})
		if te := wantCode(t, err, teamster.CodeHarnessFailed, teamster.SideEffectsNone); !strings.Contains(te.Message, want) {
			t.Fatalf("profile %s: %q does not say %q", ref, te.Message, want)
		}
	}
	if n := len(e.Requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
	// The profile's own gateway spends its key.
	a = attempt("agent:main:auth-gw", "hello")
	a.AuthProfileRef, a.Tenant = "gw-a", "gateway-a"
	if _, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: a, Host: &recHost{}}); err != nil {
		t.Fatalf("gateway-a names its own profile: %v", err)
	}
	if reqs := e.WaitRequests(t, 2); reqs[1].APIKey != keyA {
		t.Fatal("gateway-a's turn did not use its profile's key")
	}
}

// Built-in tools: only those the settings name, and of those only what the
// attempt's toolsAllow allows.
func TestBuiltinToolsFollowSettingsAndToolsAllow(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Text: "one"}, claudetest.Reply{Text: "two"})
	r := newRig(t, e, func(s *claude.Settings) { s.BuiltinTools = []string{"Read"} })
	a := attempt("agent:main:builtin", "read something")
	if _, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: a, Host: &recHost{}}); err != nil {
		t.Fatal(err)
	}
	a = attempt("agent:main:builtin-2", "read nothing")
	a.Tools = []bus.Tool{{Name: "lookup"}}
	a.ToolsAllow = &[]string{"lookup"}
	if _, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: a, Host: &recHost{}}); err != nil {
		t.Fatal(err)
	}
	reqs := e.WaitRequests(t, 2)
	if tools := reqs[0].Tools(); !slices.Contains(tools, "Read") || slices.ContainsFunc(tools, func(n string) bool { return n == "Bash" || n == "Edit" }) {
		t.Fatalf("with builtinTools [Read] the model was offered %v", tools)
	}
	if tools := reqs[1].Tools(); !slices.Equal(tools, []string{"mcp__teamster__lookup"}) {
		t.Fatalf("with toolsAllow [lookup] the model was offered %v", tools)
	}
}
