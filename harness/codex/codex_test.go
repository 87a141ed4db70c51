package codex_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/codex"
	"github.com/teamster-fleet/teamster/harness/codex/codextest"
)

// 1. A turn submitted to harness id codex returns the endpoint's text, and
// its usage is what the endpoint reported; the deltas arrive as partial
// events; the provider key never reaches a log.
func TestTurnReturnsTheEndpointsText(t *testing.T) {
	f := newFleet(t, codextest.Reply{Text: "Hello from the model", OutputTokens: 7})
	f.startWorker("w1", f.settings())

	evs, r := f.run(attempt("agent:main:one", "say hello"))
	wantOK(t, r)
	if r.HarnessID != "codex" || r.WorkerID != "w1" {
		t.Fatalf("ran on %s/%s, want codex/w1", r.HarnessID, r.WorkerID)
	}
	if !slices.Equal(r.AssistantTexts, []string{"Hello from the model"}) {
		t.Fatalf("assistant texts %q", r.AssistantTexts)
	}
	if r.Usage.OutputTokens != 7 {
		t.Fatalf("usage.outputTokens %d, want the endpoint's 7", r.Usage.OutputTokens)
	}
	if got := usageEvents(t, evs); !slices.Equal(got, []int64{7}) {
		t.Fatalf("usage events %v, want [7]", got)
	}
	if got := partialText(t, evs); got != "Hello from the model" {
		t.Fatalf("partial events say %q", got)
	}
	threadOf(t, r)

	reqs := f.endpoint.Requests()
	if len(reqs) != 1 || !reqs[0].Has("say hello") {
		t.Fatalf("the endpoint got %d requests; the first carries the prompt: %v", len(reqs), len(reqs) > 0 && reqs[0].Has("say hello"))
	}
	if n := len(codextest.Rollouts(t, f.home)); n != 1 {
		t.Fatalf("%d thread rollouts in CODEX_HOME, want 1", n)
	}
	want := []string{"initialize", "initialized", "thread/start", "turn/start", "thread/unsubscribe"}
	if got := f.trace.sent("w1"); !slices.Equal(got, want) {
		t.Fatalf("the harness sent %v, want %v", got, want)
	}
	if f.trace.count("w1", "recv", "thread/closed") != 1 {
		t.Fatal("the thread was not unloaded after the turn")
	}
	if strings.Contains(f.logs.String(), secretKey) {
		t.Fatal("a log contains the provider key from the harness settings' env")
	}
	if !strings.Contains(f.logs.String(), codextest.KeyEnv) {
		t.Fatal("the harness did not log the names of its env settings")
	}
}

// 2. The session's next turns resume the stored native thread: the endpoint
// sees the earlier messages, on the same worker and on another worker that
// shares no CODEX_HOME with it: the thread's rollout follows the session
// through the object store TEAMSTER_NATIVE_STATE.
func TestNextTurnsResumeTheThread(t *testing.T) {
	f := newFleet(t,
		codextest.Reply{Text: "Nice to meet you, Ada", OutputTokens: 3},
		codextest.Reply{Text: "Your name is Ada", OutputTokens: 4},
		codextest.Reply{Text: "Ada, still", OutputTokens: 6},
	)
	f.startWorker("w1", f.settings())
	const session = "agent:main:resume"

	_, r1 := f.run(attempt(session, "my name is Ada"))
	wantOK(t, r1)
	thread := threadOf(t, r1)

	_, r2 := f.run(attempt(session, "what is my name?"))
	wantOK(t, r2)
	if got := threadOf(t, r2); got != thread || r2.WorkerID != "w1" {
		t.Fatalf("turn 2 ran on thread %s of %s, want thread %s on w1", got, r2.WorkerID, thread)
	}
	if r2.Usage.OutputTokens != 4 {
		t.Fatalf("turn 2 usage %d, want 4", r2.Usage.OutputTokens)
	}

	// The next turn on another worker: w1 drains, w2, with a CODEX_HOME of
	// its own, takes the session with the stored binding and native state.
	home2 := codextest.NewHome(t, f.endpoint)
	s2 := f.settings()
	s2.CodexHome = home2
	f.startWorker("w2", s2)
	f.drain("w1")
	_, r3 := f.run(attempt(session, "and now?"))
	wantOK(t, r3)
	if got := threadOf(t, r3); got != thread || r3.WorkerID != "w2" {
		t.Fatalf("turn 3 ran on thread %s of %s, want thread %s on w2", got, r3.WorkerID, thread)
	}
	if !slices.Equal(r3.AssistantTexts, []string{"Ada, still"}) || r3.Usage.OutputTokens != 6 {
		t.Fatalf("turn 3: texts %q usage %d", r3.AssistantTexts, r3.Usage.OutputTokens)
	}

	reqs := f.endpoint.WaitRequests(t, 3)
	for i, want := range [][]string{
		{"my name is Ada", "Nice to meet you, Ada", "what is my name?"},
		{"my name is Ada", "Nice to meet you, Ada", "what is my name?", "Your name is Ada", "and now?"},
	} {
		for _, s := range want {
			if !reqs[i+1].Has(s) {
				t.Errorf("request %d lacks %q; its texts: %q", i+2, s, reqs[i+1].Texts())
			}
		}
	}
	if n := len(codextest.Rollouts(t, f.home)); n != 1 {
		t.Fatalf("%d thread rollouts in w1's CODEX_HOME, want the one thread", n)
	}
	if n := len(codextest.Rollouts(t, home2)); n != 1 {
		t.Fatalf("%d thread rollouts in w2's CODEX_HOME, want the one thread, restored", n)
	}
	// The record names one state object, the last turn's; the objects of
	// the turns before were deleted once their successors committed.
	if names := f.stateObjects(1); len(names) != 1 {
		t.Fatalf("objects in %s: %q, want the last turn's only", bus.BucketNativeState, names)
	}
	if f.trace.count("w1", "send", "thread/resume") != 1 || f.trace.count("w2", "send", "thread/resume") != 1 || f.trace.count("w2", "send", "thread/start") != 0 {
		t.Fatalf("w1 sent %v, w2 sent %v", f.trace.sent("w1"), f.trace.sent("w2"))
	}
}

// 3. A tool round trip: the endpoint calls a tool, the app-server asks the
// worker, the gateway answers through the fleet, and the endpoint's next
// request carries the tool's output.
func TestToolRoundTrip(t *testing.T) {
	f := newFleet(t,
		codextest.Reply{Call: &codextest.Call{Name: "lookup", Args: map[string]any{"q": "meaning"}}, OutputTokens: 3},
		codextest.Reply{Text: "The answer is 42", OutputTokens: 4},
	)
	f.startWorker("w1", f.settings())
	g := f.serveGateway("gw-1", map[string]any{"answer": 42})

	a := attempt("agent:main:tools", "look up the meaning")
	a.HostID = "gw-1"
	a.Tools = []bus.Tool{{Name: "lookup", Description: "Looks something up",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)}}
	evs, r := f.run(a)
	wantOK(t, r)
	if !slices.Equal(r.AssistantTexts, []string{"The answer is 42"}) || r.Usage.OutputTokens != 7 {
		t.Fatalf("texts %q usage %d, want the final text and 3+4 tokens", r.AssistantTexts, r.Usage.OutputTokens)
	}

	reqs := f.endpoint.WaitRequests(t, 2)
	if !slices.Contains(reqs[0].Tools(), "lookup") {
		t.Fatalf("the model was not offered the tool: %v", reqs[0].Tools())
	}
	output := reqs[1].CallOutput()
	if !strings.Contains(output, `"answer":42`) {
		t.Fatalf("the endpoint's next request carries tool output %q", output)
	}

	calls, terms, usage := g.snapshot()
	if len(calls) != 1 || calls[0].Name != "lookup" || string(calls[0].Args) != `{"q":"meaning"}` {
		t.Fatalf("the gateway got tool calls %+v", calls)
	}
	if len(terms) != 1 || terms[0].CallID != calls[0].CallID || terms[0].Outcome != bus.OutcomeSuccess || !terms[0].ExecutionStarted {
		t.Fatalf("the gateway got terminal reports %+v", terms)
	}
	var total int64
	for _, u := range usage {
		total += u.OutputTokens
	}
	if len(usage) != 2 || total != 7 {
		t.Fatalf("the gateway got usage reports %+v, want one per response, 7 tokens", usage)
	}
	var toolEvents int
	for _, e := range evs {
		if e.Type == bus.EventTool {
			toolEvents++
			var d bus.ToolData
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Outcome != bus.OutcomeSuccess {
				t.Fatalf("tool event %s", e.Data)
			}
		}
	}
	if toolEvents != 1 || f.trace.count("w1", "recv", "item/tool/call") != 1 {
		t.Fatalf("%d tool events, %d item/tool/call requests", toolEvents, f.trace.count("w1", "recv", "item/tool/call"))
	}
}

// A tool the host refuses: the model is told, the terminal report says
// failure, and the host's canonical last tool error is in the result.
func TestFailedToolKeepsTheHostsLastToolError(t *testing.T) {
	f := newFleet(t,
		codextest.Reply{Call: &codextest.Call{Name: "lookup", Args: map[string]any{"q": "x"}}},
		codextest.Reply{Text: "The lookup failed"},
	)
	f.startWorker("w1", f.settings())
	g := f.serveGateway("gw-2", nil)
	g.mu.Lock()
	g.fail = true
	g.mu.Unlock()
	a := attempt("agent:main:toolfail", "look it up")
	a.HostID = "gw-2"
	a.Tools = []bus.Tool{{Name: "lookup"}}
	_, r := f.run(a)
	wantOK(t, r)
	var last struct {
		ToolName string          `json:"toolName"`
		Error    json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(r.LastToolError, &last); err != nil || last.ToolName != "lookup" || !strings.Contains(string(last.Error), "the lookup service is down") {
		t.Fatalf("lastToolError %s (%v)", r.LastToolError, err)
	}
	_, terms, _ := g.snapshot()
	if len(terms) != 1 || terms[0].Outcome != bus.OutcomeFailure || !terms[0].ExecutionStarted {
		t.Fatalf("terminal reports %+v", terms)
	}
	if reqs := f.endpoint.WaitRequests(t, 2); !reqs[1].Has("the tool failed: the lookup service is down") {
		t.Fatalf("the model was told %q", reqs[1].Texts())
	}
}

// 4a. A V2 inject during a running turn reaches the app-server as
// turn/steer and is in the endpoint's next request; source-bound input whose
// source was revoked is refused before anything is written.
func TestInjectSteersTheRunningTurn(t *testing.T) {
	f := newFleet(t,
		codextest.Reply{Hold: true},
		codextest.Reply{Text: "Also the moon", OutputTokens: 2},
	)
	f.startWorker("w1", f.settings())
	const session = "agent:main:steer"
	h := f.submit(attempt(session, "tell me about the sun"))
	f.endpoint.WaitRequests(t, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.client.GrantSource(ctx, "voice-1", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.client.RevokeSource(ctx, "voice-1"); err != nil {
		t.Fatal(err)
	}
	_, err := f.client.Inject(ctx, bus.InjectRequest{SessionKey: session, Text: "REVOKED INPUT",
		AuthorityKind: bus.AuthoritySourceBound, Source: &bus.SourceRef{ID: "voice-1", Generation: 1}})
	if !errors.Is(err, teamster.ErrSourceRevoked) {
		t.Fatalf("source-bound inject of a revoked source: %v, want source_revoked", err)
	}
	if n := f.trace.count("w1", "send", "turn/steer"); n != 0 {
		t.Fatalf("%d steers written for refused input", n)
	}

	rep, err := f.client.Inject(ctx, bus.InjectRequest{SessionKey: session, Text: "INJECTED: mention the moon too"})
	if err != nil || rep.Status != bus.StatusAccepted {
		t.Fatalf("inject: %+v %v", rep, err)
	}
	evs := collect(t, h)
	r := result(t, h)
	wantOK(t, r)
	if !slices.Equal(r.AssistantTexts, []string{"Also the moon"}) {
		t.Fatalf("texts %q", r.AssistantTexts)
	}
	if n := f.trace.count("w1", "send", "turn/steer"); n != 1 {
		t.Fatalf("%d turn/steer written, want 1", n)
	}
	reqs := f.endpoint.WaitRequests(t, 2)
	if !reqs[0].Aborted {
		t.Fatal("the request in flight when the steer arrived was not abandoned")
	}
	if !reqs[1].Has("INJECTED: mention the moon too") || reqs[1].Has("REVOKED INPUT") {
		t.Fatalf("the next request's texts: %q", reqs[1].Texts())
	}
	var states []string
	for _, e := range evs {
		if e.Type != bus.EventInjection {
			continue
		}
		var d bus.InjectionData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.InjectionID == rep.InjectionID {
			states = append(states, d.State)
		}
	}
	if !slices.Equal(states, []string{"accepted", "committed"}) {
		t.Fatalf("injection %s went through %v, want accepted then committed", rep.InjectionID, states)
	}
}

// 4b. Cancel during a turn sends turn/interrupt, and the turn ends
// cancelled.
func TestCancelInterruptsTheTurn(t *testing.T) {
	f := newFleet(t, codextest.Reply{Hold: true})
	f.startWorker("w1", f.settings())
	h := f.submit(attempt("agent:main:cancel", "write a long essay"))
	f.endpoint.WaitRequests(t, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.client.Cancel(ctx, h.AttemptID(), "the user pressed stop"); err != nil {
		t.Fatal(err)
	}
	r := result(t, h)
	if r.Status != "cancelled" || r.Error == nil || r.Error.Code != teamster.CodeCancelled {
		t.Fatalf("result %s %+v, want cancelled", r.Status, r.Error)
	}
	if f.trace.count("w1", "send", "turn/interrupt") != 1 {
		t.Fatalf("the harness sent %v, want a turn/interrupt", f.trace.sent("w1"))
	}
	f.endpoint.WaitAborted(t, 0)
	if f.trace.count("w1", "send", "thread/unsubscribe") != 1 || f.trace.count("w1", "recv", "thread/closed") != 1 {
		t.Fatal("the interrupted thread was not let go")
	}
}

// 5a. A minimum version above the installed one is refused with a clear
// error before any thread starts.
func TestMinimumVersionIsEnforced(t *testing.T) {
	f := newFleet(t, codextest.Reply{Text: "never"})
	s := f.settings()
	s.MinVersion = "99.0.0"
	f.startWorker("w1", s)

	_, r := f.run(attempt("agent:main:version", "hello"))
	if r.Status != "error" || r.Error == nil || r.Error.Code != teamster.CodeHarnessFailed {
		t.Fatalf("result %s %+v, want harness_failed", r.Status, r.Error)
	}
	for _, s := range []string{"0.171.0", "older than the minimum version 99.0.0"} {
		if !strings.Contains(r.Error.Message, s) {
			t.Fatalf("error %q does not say %q", r.Error.Message, s)
		}
	}
	if r.Error.SideEffects != teamster.SideEffectsNone {
		t.Fatalf("sideEffects %q, want none: nothing ran", r.Error.SideEffects)
	}
	if got := f.trace.sent("w1"); slices.Contains(got, "thread/start") || slices.Contains(got, "thread/resume") || slices.Contains(got, "turn/start") {
		t.Fatalf("the harness sent %v", got)
	}
	if n := len(f.endpoint.Requests()); n != 0 {
		t.Fatalf("the endpoint got %d requests", n)
	}
	if n := len(codextest.Rollouts(t, f.home)); n != 0 {
		t.Fatalf("%d threads in CODEX_HOME", n)
	}
}

// 5b. An app-server killed mid-turn ends that turn with harness_failed (never
// replayed), and the next turn works on a fresh process, resuming the thread.
func TestKilledAppServerFailsTheTurnAndRestarts(t *testing.T) {
	f := newFleet(t,
		codextest.Reply{Text: "first reply"},
		codextest.Reply{Hold: true},
		codextest.Reply{Text: "after the restart"},
	)
	f.startWorker("w1", f.settings())
	h := f.harnesses["w1"]
	const session = "agent:main:kill"

	_, r1 := f.run(attempt(session, "turn one"))
	wantOK(t, r1)
	pid := codex.PID(h)
	if pid == 0 {
		t.Fatal("no app-server running after a turn")
	}

	hd := f.submit(attempt(session, "turn two, killed"))
	f.endpoint.WaitRequests(t, 2)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r2 := result(t, hd)
	if r2.Status != "error" || r2.Error == nil || r2.Error.Code != teamster.CodeHarnessFailed ||
		!strings.Contains(r2.Error.Message, "exited during the turn") {
		t.Fatalf("the killed turn: %s %+v", r2.Status, r2.Error)
	}

	_, r3 := f.run(attempt(session, "turn three"))
	wantOK(t, r3)
	if !slices.Equal(r3.AssistantTexts, []string{"after the restart"}) {
		t.Fatalf("texts %q", r3.AssistantTexts)
	}
	if p := codex.PID(h); p == 0 || p == pid {
		t.Fatalf("turn three ran on pid %d; the killed one was %d", p, pid)
	}
	if threadOf(t, r3) != threadOf(t, r1) {
		t.Fatal("turn three did not resume the session's thread")
	}
	reqs := f.endpoint.Requests()
	if len(reqs) != 3 || !reqs[2].Has("first reply") {
		t.Fatalf("%d requests; the last carries the history: %v", len(reqs), len(reqs) == 3 && reqs[2].Has("first reply"))
	}
	// Never replayed: only the killed request ends with turn two's prompt.
	for i, rq := range reqs {
		texts := rq.Texts()
		if i != 1 && len(texts) > 0 && texts[len(texts)-1] == "turn two, killed" {
			t.Fatalf("request %d replays the killed turn", i+1)
		}
	}
}

// Approval requests are declined unless the settings allow them.
func TestApprovals(t *testing.T) {
	for _, allow := range []bool{false, true} {
		name := map[bool]string{false: "declined", true: "allowed"}[allow]
		t.Run(name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "approved")
			f := newFleet(t,
				codextest.Reply{Call: &codextest.Call{Name: "exec_command", Args: map[string]any{
					"cmd": "touch " + marker, "sandbox_permissions": "require_escalated", "justification": "the test asks",
					"yield_time_ms": 30000}}},
				codextest.Reply{Text: "done"},
			)
			s := f.settings()
			s.AllowApprovals = allow
			f.startWorker("w1", s)
			evs, r := f.run(attempt("agent:main:approve-"+name, "touch the marker"))
			wantOK(t, r)
			_, err := os.Stat(marker)
			for deadline := time.Now().Add(10 * time.Second); allow && err != nil && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond) // an accepted command may finish after its yield window
				_, err = os.Stat(marker)
			}
			if ran := err == nil; ran != allow {
				t.Fatalf("the command ran: %v, want %v; the model was told %q", ran, allow, f.endpoint.WaitRequests(t, 2)[1].Texts())
			}
			if f.trace.count("w1", "recv", "item/commandExecution/requestApproval") != 1 {
				t.Fatal("no approval request reached the harness")
			}
			decision := map[bool]string{false: `"decision":"declined"`, true: `"decision":"accepted"`}[allow]
			if !slices.ContainsFunc(evs, func(e bus.Event) bool { return e.Type == bus.EventAgent && strings.Contains(string(e.Data), decision) }) {
				t.Fatalf("no agent event with %s", decision)
			}
			if reqs := f.endpoint.WaitRequests(t, 2); !allow && !reqs[1].Has("rejected") {
				t.Fatalf("the declined command's output: %q", reqs[1].Texts())
			}
		})
	}
}

// The model's request_user_input never reaches the harness: the app-server
// offers the tool, but outside Plan mode (the harness never starts one) it
// answers the call itself and the turn goes on. The harness refuses
// item/tool/requestUserInput; this test fails first if a codex version starts
// sending it in the default mode, where the harness would then need to ask
// the gateway (Host.UserInput).
func TestRequestUserInputStaysInsideTheAppServer(t *testing.T) {
	f := newFleet(t,
		codextest.Reply{Call: &codextest.Call{Name: "request_user_input", Args: map[string]any{"questions": []any{
			map[string]any{"id": "color", "header": "Color", "question": "Which color?", "options": []any{
				map[string]any{"label": "Red", "description": "warm"}, map[string]any{"label": "Blue", "description": "cool"}}}}}}},
		codextest.Reply{Text: "done"},
	)
	f.startWorker("w1", f.settings())
	g := f.serveGateway("gw-1", nil)
	a := attempt("agent:main:ask", "ask me something")
	a.HostID = "gw-1"
	_, r := f.run(a)
	wantOK(t, r)

	reqs := f.endpoint.WaitRequests(t, 2)
	if !slices.Contains(reqs[0].Tools(), "request_user_input") {
		t.Fatalf("the app-server no longer offers request_user_input: %v", reqs[0].Tools())
	}
	output := reqs[1].CallOutput()
	if !strings.Contains(output, "unavailable") {
		t.Fatalf("the model was told %q, want the app-server's own refusal", output)
	}
	if n := f.trace.count("w1", "recv", "item/tool/requestUserInput"); n != 0 {
		t.Fatalf("%d item/tool/requestUserInput requests reached the harness", n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.others) != 0 {
		t.Fatalf("the gateway was asked %v", g.others)
	}
}

// Turns of several sessions run at once on one worker's single app-server,
// each on its own thread, with no cross-talk.
func TestConcurrentSessionsShareTheProcess(t *testing.T) {
	const n = 4
	f := newFleet(t)
	for range n {
		f.endpoint.Script(codextest.Reply{Text: "done", OutputTokens: 2, Hold: true, HoldFor: 300 * time.Millisecond})
	}
	f.startWorker("w1", f.settings())
	handles := make([]*client.Handle, n)
	for i := range n {
		handles[i] = f.submit(attempt(fmt.Sprintf("agent:main:many-%d", i), fmt.Sprintf("prompt of session %d", i)))
	}
	threads := map[string]bool{}
	for _, h := range handles {
		r := result(t, h)
		wantOK(t, r)
		if !slices.Equal(r.AssistantTexts, []string{"done"}) || r.Usage.OutputTokens != 2 {
			t.Fatalf("texts %q usage %d", r.AssistantTexts, r.Usage.OutputTokens)
		}
		threads[threadOf(t, r)] = true
	}
	if len(threads) != n {
		t.Fatalf("%d threads for %d sessions", len(threads), n)
	}
	for i, rq := range f.endpoint.WaitRequests(t, n) {
		var mine int
		for j := range n {
			if rq.Has(fmt.Sprintf("prompt of session %d", j)) {
				mine++
			}
		}
		if mine != 1 {
			t.Fatalf("request %d carries %d sessions' prompts", i+1, mine)
		}
	}
	if c := f.trace.count("w1", "send", "initialize"); c != 1 {
		t.Fatalf("%d app-server handshakes, want one shared process", c)
	}
}

// A run whose lease stops being current after the thread is opened never
// starts the turn: the endpoint sees nothing and the attempt is lease_lost
// with no side effects.
func TestTurnIsNotStartedOnceTheLeaseIsNotCurrent(t *testing.T) {
	bin := codextest.Binary(t)
	endpoint := codextest.NewEndpoint(t, codextest.Reply{Text: "never"})
	home := codextest.NewHome(t, endpoint)
	h, err := codex.New(manifest, codex.Settings{Binary: bin, CodexHome: home, Cwd: t.TempDir(), Env: map[string]string{codextest.KeyEnv: secretKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var (
		mu   sync.Mutex
		sent []string
	)
	codex.SetTrace(h, func(dir, method string) {
		if dir == "send" {
			mu.Lock()
			sent = append(sent, method)
			mu.Unlock()
		}
	})
	checks := 0
	run := &harness.Run{Attempt: attempt("agent:main:paused", "say hello"), Host: quietHost{},
		Current: func() bool { checks++; return checks == 1 }}
	_, err = h.RunAttempt(t.Context(), run)
	e := teamster.AsError(err)
	if e == nil || e.Code != teamster.CodeLeaseLost || e.SideEffects != teamster.SideEffectsNone {
		t.Fatalf("RunAttempt: %v, want lease_lost with no side effects", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(sent, "turn/start") || !slices.Contains(sent, "thread/start") {
		t.Fatalf("the harness sent %v: want thread/start and no turn/start", sent)
	}
	if n := len(endpoint.Requests()); n != 0 {
		t.Fatalf("the endpoint got %d requests, want none", n)
	}
}

// quietHost is a harness.Host that accepts everything and calls nothing.
type quietHost struct{}

func (quietHost) Emit(context.Context, string, any) error { return nil }
func (quietHost) Tool(context.Context, bus.ToolCall) (*bus.ToolReply, error) {
	return nil, teamster.Errorf(teamster.CodeHarnessFailed, "no tools here")
}
func (quietHost) ToolTerminal(context.Context, bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
	return &bus.ToolTerminalReply{}, nil
}
func (quietHost) UserInput(context.Context, bus.UserInput) (*bus.UserInputReply, error) {
	return nil, teamster.Errorf(teamster.CodeHarnessFailed, "no questions here")
}
func (quietHost) ReportUsage(context.Context, string, int64) error { return nil }
