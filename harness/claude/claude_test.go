package claude_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/claude"
	"github.com/teamster-fleet/teamster/harness/claude/claudetest"
)

// A text turn: the endpoint's text comes back as the assistant text and as
// partial events, the thinking as a reasoning event, the usage is reported
// once for the response, the binding names the CLI's session, and the key
// reaches the endpoint and nothing else.
func TestTextTurn(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Thinking: "The user wants a greeting.", Text: "Hello from the model", OutputTokens: 7})
	r := newRig(t, e, nil)
	host := &recHost{}
	out, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: attempt("agent:main:text", "say hello"), Host: host, WorkerID: "w1", Fence: "1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.AssistantTexts, []string{"Hello from the model"}) {
		t.Fatalf("assistant texts %q", out.AssistantTexts)
	}
	if out.ReasoningText != "The user wants a greeting." || out.Classification() != "" {
		t.Fatalf("reasoning %q, classification %q", out.ReasoningText, out.Classification())
	}
	sid := sessionOf(t, out)
	evs, _, _, usage := host.snapshot()
	if got := partialText(t, evs); got != "Hello from the model" {
		t.Fatalf("partial events say %q", got)
	}
	reqs := e.WaitRequests(t, 1)
	if len(reqs) != 1 || !reqs[0].Has("say hello") {
		t.Fatalf("%d turn requests; the first carries the prompt: %v", len(reqs), len(reqs) > 0 && reqs[0].Has("say hello"))
	}
	if !slices.Equal(usage, []usageReport{{reqs[0].ResponseID, 7}}) {
		t.Fatalf("usage reports %+v, want one for %s with 7 tokens", usage, reqs[0].ResponseID)
	}
	if !slices.ContainsFunc(evs, func(ev event) bool {
		return ev.Type == bus.EventAgent && strings.Contains(string(ev.Data), `"kind":"reasoning"`) && strings.Contains(string(ev.Data), "greeting")
	}) {
		t.Fatal("no reasoning agent event")
	}
	if reqs[0].APIKey != secretKey {
		t.Fatalf("the endpoint got x-api-key %q, want the worker's key", reqs[0].APIKey)
	}
	if tools := reqs[0].Tools(); len(tools) != 0 {
		t.Fatalf("the model was offered %v; without settings' builtinTools and attempt tools it gets none", tools)
	}
	noSecret(t, r, evs, out)
	if !strings.Contains(r.logs.String(), claudetest.KeyEnv) {
		t.Fatal("the harness did not log the name of the key's variable")
	}
	if sid == "" || !strings.Contains(string(out.NativeSession), sid) {
		t.Fatal("no binding")
	}
}

// noSecret fails when the key is in a log line, an event or the outcome.
func noSecret(t *testing.T, r *rig, evs []event, out *harness.Outcome) {
	t.Helper()
	if strings.Contains(r.logs.String(), secretKey) {
		t.Fatal("a log line contains the API key")
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Data), secretKey) {
			t.Fatalf("a %s event contains the API key", ev.Type)
		}
	}
	if out != nil {
		b, _ := json.Marshal(out)
		if strings.Contains(string(b), secretKey) {
			t.Fatal("the outcome contains the API key")
		}
	}
}

// A turn that only thinks is reasoning-only; one that says nothing, empty.
// Claude Code asks the model once more after a response without visible
// output ("[Your previous response had no visible output. ...]"), so each
// such turn makes two requests.
func TestTurnsWithoutVisibleText(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Thinking: "Nothing to say."}, claudetest.Reply{}, claudetest.Reply{}, claudetest.Reply{})
	r := newRig(t, e, nil)
	for i, want := range []string{bus.ClassReasoningOnly, bus.ClassEmpty} {
		out, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: attempt("agent:main:quiet", "think"), Host: &recHost{}})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Classification(); got != want {
			t.Fatalf("turn %d: classification %q (texts %q, reasoning %q), want %q", i+1, got, out.AssistantTexts, out.ReasoningText, want)
		}
	}
	if n := len(e.Requests()); n != 4 {
		t.Fatalf("%d requests, want 2 per turn", n)
	}
}

// The next turn runs in another harness instance with another home and
// another cwd, from the exported state: the endpoint sees the first turn's
// history, and the session keeps its id.
func TestResumeFromExportedState(t *testing.T) {
	e := claudetest.NewEndpoint(t,
		claudetest.Reply{Text: "Nice to meet you, Ada", OutputTokens: 3},
		claudetest.Reply{Text: "Your name is Ada", OutputTokens: 4},
	)
	r1 := newRig(t, e, nil)
	const session = "agent:main:resume"
	out1, err := r1.h.RunAttempt(t.Context(), &harness.Run{Attempt: attempt(session, "my name is Ada"), Host: &recHost{}})
	if err != nil {
		t.Fatal(err)
	}
	sid := sessionOf(t, out1)
	blob, err := r1.h.ExportState(t.Context(), out1.NativeSession)
	if err != nil {
		t.Fatal(err)
	}
	files := tarNames(t, blob)
	if len(files) != 1 || !strings.HasPrefix(files[0], ".claude/projects/") || !strings.HasSuffix(files[0], "/"+sid+".jsonl") {
		t.Fatalf("the exported state holds %v, want the session's transcript", files)
	}

	r2 := newRig(t, e, nil)
	if err := r2.h.ImportState(t.Context(), out1.NativeSession, blob); err != nil {
		t.Fatal(err)
	}
	host := &recHost{}
	out2, err := r2.h.RunAttempt(t.Context(), &harness.Run{Attempt: attempt(session, "what is my name?"), Host: host, Binding: out1.NativeSession})
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionOf(t, out2); got != sid {
		t.Fatalf("the resumed turn is bound to session %s, want %s", got, sid)
	}
	if !slices.Equal(out2.AssistantTexts, []string{"Your name is Ada"}) {
		t.Fatalf("texts %q", out2.AssistantTexts)
	}
	reqs := e.WaitRequests(t, 2)
	for _, s := range []string{"my name is Ada", "Nice to meet you, Ada", "what is my name?"} {
		if !reqs[1].Has(s) {
			t.Errorf("the resumed request lacks %q; its texts: %q", s, reqs[1].Texts())
		}
	}
	if _, _, _, usage := host.snapshot(); len(usage) != 1 || usage[0].Tokens != 4 {
		t.Fatalf("usage of the resumed turn %+v, want one report of 4", usage)
	}
	// A third harness without the state cannot resume: nothing starts.
	r3 := newRig(t, e, nil)
	_, err = r3.h.RunAttempt(t.Context(), &harness.Run{Attempt: attempt(session, "and now?"), Host: &recHost{}, Binding: out1.NativeSession})
	if e := wantCode(t, err, "harness_failed", "none"); !strings.Contains(e.Message, "cannot resume") {
		t.Fatalf("error %q", e.Message)
	}
	if n := len(e.Requests()); n != 2 {
		t.Fatalf("the endpoint got %d turn requests, want 2", n)
	}
}

func tarNames(t *testing.T, blob []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(blob))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name)
	}
}

// A settled-turn finalization resumes the turn's session with the host's
// instruction and every tool withheld: the model is offered no tool at all
// (the settings' built-ins neither), the request carries the turn before it,
// the binding stays the session's, and nothing can steer it. Without a
// session to continue, or with a tool allowed, nothing starts.
func TestFinalizeSettledTurn(t *testing.T) {
	e := claudetest.NewEndpoint(t, claudetest.Reply{Text: "looked"}, claudetest.Reply{Text: "Here is the summary.", OutputTokens: 5})
	r := newRig(t, e, func(s *claude.Settings) { s.BuiltinTools = []string{"Read"} })
	const session = "agent:main:finalize"
	out1, err := r.h.RunAttempt(t.Context(), &harness.Run{Attempt: attempt(session, "look it up"), Host: &recHost{}})
	if err != nil {
		t.Fatal(err)
	}
	var fin harness.Finalizer = r.h
	a := attempt(session, "The previous assistant turn completed its tool calls but did not produce a user-visible answer.")
	a.AttemptID += "-final"
	a.Operation = bus.OperationSettledToolFinalization
	a.ToolsAllow = &[]string{}
	run := &harness.Run{Attempt: a, Host: &recHost{}, Binding: out1.NativeSession}
	out2, err := fin.FinalizeSettledTurn(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out2.AssistantTexts, []string{"Here is the summary."}) || sessionOf(t, out2) != sessionOf(t, out1) {
		t.Fatalf("finalization %q on session %s, want the summary on %s", out2.AssistantTexts, sessionOf(t, out2), sessionOf(t, out1))
	}
	reqs := e.WaitRequests(t, 2)
	if tools := reqs[0].Tools(); !slices.Contains(tools, "Read") {
		t.Fatalf("the turn was offered %v, want its built-in Read", tools)
	}
	if tools := reqs[1].Tools(); len(tools) != 0 {
		t.Fatalf("the finalization offered the model %v, want no tool", tools)
	}
	if !reqs[1].Has("look it up") || !reqs[1].Has("did not produce a user-visible answer") {
		t.Fatalf("the finalization's request does not continue the turn: %q", reqs[1].Texts())
	}
	if run.Injector() != nil {
		t.Fatal("the finalization installed an injection handle")
	}

	noThread := &harness.Run{Attempt: a, Host: &recHost{}}
	_, err = fin.FinalizeSettledTurn(t.Context(), noThread)
	wantCode(t, err, "harness_failed", "none")
	allowed := *a
	allowed.ToolsAllow = &[]string{"Read"}
	_, err = fin.FinalizeSettledTurn(t.Context(), &harness.Run{Attempt: &allowed, Host: &recHost{}, Binding: out1.NativeSession})
	wantCode(t, err, "harness_failed", "none")
	if n := len(e.Requests()); n != 2 {
		t.Fatalf("the endpoint got %d turn requests, want 2: a refused finalization started something", n)
	}
}
