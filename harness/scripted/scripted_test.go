package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/selection"
)

func TestEcho(t *testing.T) {
	for _, prompt := range []string{
		"hello",
		"",
		`{ "script": [{"fail": "no"}]}`, // not the exact prefix
		`{"scripts": []}`,
		`["script"]`,
		"multi\nline \u00e9",
	} {
		t.Run(prompt, func(t *testing.T) {
			h := &host{}
			out, err := play(t, prompt, h)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(map[string]string{"text": prompt})
			if diff := cmp.Diff([]event{{bus.EventPartial, string(want)}}, h.Events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{prompt}, out.AssistantTexts); diff != "" {
				t.Errorf("assistant texts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSteps plays each step alone and checks its events and outcome.
func TestSteps(t *testing.T) {
	for _, tc := range []struct {
		name      string
		steps     []any
		events    []event
		texts     []string
		reasoning string
		plan      string
		usage     []usageCall
	}{
		{name: "say", steps: []any{m{"say": "hi"}},
			events: []event{{"partial", `{"text":"hi"}`}}, texts: []string{"hi"}},
		{name: "reason", steps: []any{m{"reason": "hmm"}},
			events: []event{{"agent", `{"kind":"reasoning","text":"hmm"}`}}, reasoning: "hmm"},
		{name: "plan", steps: []any{m{"plan": "1. do"}},
			events: []event{{"agent", `{"kind":"plan","text":"1. do"}`}}, plan: "1. do"},
		{name: "reasons join by line", steps: []any{m{"reason": "a"}, m{"reason": "b"}},
			events:    []event{{"agent", `{"kind":"reasoning","text":"a"}`}, {"agent", `{"kind":"reasoning","text":"b"}`}},
			reasoning: "a\nb"},
		{name: "sleep", steps: []any{m{"sleep": 1}}},
		{name: "sleep zero", steps: []any{m{"sleep": 0}}},
		{name: "usage", steps: []any{m{"usage": 42}}, usage: []usageCall{{"resp-1", 42}}},
		{name: "awaitInjection without a handle", steps: []any{m{"awaitInjection": 1}}},
		{name: "empty script", steps: nil},
		{name: "leading whitespace", steps: []any{m{"say": "x"}},
			events: []event{{"partial", `{"text":"x"}`}}, texts: []string{"x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &host{}
			prompt := script(t, tc.steps...)
			if tc.name == "leading whitespace" {
				prompt = " \n\t" + prompt
			}
			out, err := play(t, prompt, h)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.events, h.Events(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.texts, out.AssistantTexts, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("assistant texts (-want +got):\n%s", diff)
			}
			if out.AssistantTexts == nil {
				t.Errorf("assistant texts are nil, want a list")
			}
			if out.ReasoningText != tc.reasoning || out.PlanText != tc.plan {
				t.Errorf("reasoning %q plan %q, want %q %q", out.ReasoningText, out.PlanText, tc.reasoning, tc.plan)
			}
			if diff := cmp.Diff(tc.usage, h.usage, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWhitespace: JSON whitespace anywhere in a script is fine.
func TestWhitespace(t *testing.T) {
	h := &host{}
	prompt := "\n {\"script\":\n [ { \"say\" : \"a\" } ,\t{\"tool\": { \"name\" : \"t\", \"args\" : { \"k\" : 1 } } },\r\n {\"usage\":  2 } ] }\n"
	out, err := play(t, prompt, h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", `{"ok":true}`}, out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	if len(h.calls) != 1 || len(h.usage) != 1 {
		t.Errorf("calls %v usage %v, want one each", h.calls, h.usage)
	}
}

func TestEventOrder(t *testing.T) {
	h := &host{}
	out, err := play(t, script(t,
		m{"reason": "think"},
		m{"plan": "plan"},
		m{"say": "one"},
		m{"tool": m{"name": "search", "args": m{"q": "x"}}},
		m{"usage": 7},
		m{"say": "two"},
	), h)
	if err != nil {
		t.Fatal(err)
	}
	want := []event{
		{"agent", `{"kind":"reasoning","text":"think"}`},
		{"agent", `{"kind":"plan","text":"plan"}`},
		{"partial", `{"text":"one"}`},
		{"tool", `{"callId":"call-1","name":"search","args":{"q":"x"},"outcome":"success","result":{"ok":true}}`},
		{"partial", `{"text":"two"}`},
	}
	if diff := cmp.Diff(want, h.Events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"one", `{"ok":true}`, "two"}, out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	if out.Classification() != "" {
		t.Errorf("classification %q, want none", out.Classification())
	}
}

func TestClassification(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []any
		want  string
	}{
		{"reason only", []any{m{"reason": "r"}}, bus.ClassReasoningOnly},
		{"plan only", []any{m{"plan": "p"}}, bus.ClassPlanningOnly},
		{"plan and reason", []any{m{"reason": "r"}, m{"plan": "p"}}, bus.ClassPlanningOnly},
		{"empty", nil, bus.ClassEmpty},
		{"usage only", []any{m{"usage": 3}}, bus.ClassEmpty},
		{"empty say", []any{m{"say": ""}}, bus.ClassEmpty},
		{"visible", []any{m{"reason": "r"}, m{"say": "s"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := play(t, script(t, tc.steps...), &host{})
			if err != nil {
				t.Fatal(err)
			}
			if got := out.Classification(); got != tc.want {
				t.Errorf("classification %q, want %q", got, tc.want)
			}
		})
	}
}

func TestToolSuccess(t *testing.T) {
	h := &host{toolReply: func(c bus.ToolCall) (*bus.ToolReply, error) {
		return &bus.ToolReply{V: 1, Status: bus.StatusOK, Result: json.RawMessage(`{"hits":["a","b"]}`)}, nil
	}}
	out, err := play(t, script(t, m{"tool": m{"name": "search", "args": m{"q": "go"}}}, m{"tool": m{"name": "clock"}}), h)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := []bus.ToolCall{
		{V: 1, CallID: "call-1", Name: "search", Args: json.RawMessage(`{"q":"go"}`)},
		{V: 1, CallID: "call-2", Name: "clock"},
	}
	if diff := cmp.Diff(wantCalls, h.calls); diff != "" {
		t.Errorf("tool calls (-want +got):\n%s", diff)
	}
	wantTerms := []bus.ToolTerminal{
		{V: 1, CallID: "call-1", Name: "search", Args: json.RawMessage(`{"q":"go"}`), ExecutionStarted: true, Outcome: bus.OutcomeSuccess},
		{V: 1, CallID: "call-2", Name: "clock", ExecutionStarted: true, Outcome: bus.OutcomeSuccess},
	}
	if diff := cmp.Diff(wantTerms, h.terminals); diff != "" {
		t.Errorf("terminal reports (-want +got):\n%s", diff)
	}
	for _, c := range h.calls {
		if err := c.Validate(); err != nil {
			t.Errorf("tool call %+v does not validate: %v", c, err)
		}
	}
	for _, tt := range h.terminals {
		if err := tt.Validate(); err != nil {
			t.Errorf("terminal report %+v does not validate: %v", tt, err)
		}
	}
	if diff := cmp.Diff([]string{`{"hits":["a","b"]}`, `{"hits":["a","b"]}`}, out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	if out.LastToolError != nil {
		t.Errorf("lastToolError %s, want none", out.LastToolError)
	}
}

func TestToolFailure(t *testing.T) {
	lastErr := json.RawMessage(`{"toolName":"search","error":"boom"}`)
	for _, tc := range []struct {
		name string
		// terminal answers the second (successful) call's terminal report.
		keep bool
		want json.RawMessage
	}{
		{"host clears it after a success", false, nil},
		{"host keeps it after a success", true, lastErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &host{
				toolReply: func(c bus.ToolCall) (*bus.ToolReply, error) {
					if c.CallID == "call-1" {
						return &bus.ToolReply{V: 1, Status: bus.StatusRejected, Error: teamster.Errorf(teamster.CodeInvalidRequest, "boom")}, nil
					}
					return &bus.ToolReply{V: 1, Status: bus.StatusOK, Result: json.RawMessage(`"fine"`)}, nil
				},
				terminalReply: func(tt bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
					if tt.Outcome == bus.OutcomeFailure || tc.keep {
						return &bus.ToolTerminalReply{V: 1, Status: bus.StatusOK, LastToolError: lastErr}, nil
					}
					return &bus.ToolTerminalReply{V: 1, Status: bus.StatusOK}, nil
				},
			}
			// One failing call alone.
			out, err := play(t, script(t, m{"tool": m{"name": "search", "args": m{}}}), h)
			if err != nil {
				t.Fatal(err)
			}
			if string(out.LastToolError) != string(lastErr) {
				t.Errorf("lastToolError %s, want %s", out.LastToolError, lastErr)
			}
			if len(out.AssistantTexts) != 0 {
				t.Errorf("a failed call added assistant texts %q", out.AssistantTexts)
			}
			wantEv := []event{{"tool", `{"callId":"call-1","name":"search","args":{},"outcome":"failure","error":{"code":"invalid_request","message":"boom"}}`}}
			if diff := cmp.Diff(wantEv, h.Events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			term := h.terminals[0]
			if term.Outcome != bus.OutcomeFailure || !term.ExecutionStarted || string(term.Error) != `{"code":"invalid_request","message":"boom"}` {
				t.Errorf("terminal report %+v, want a started failure carrying the error", term)
			}

			// A failure, then a success: lastToolError is whatever the host
			// returned last.
			out, err = play(t, script(t, m{"tool": m{"name": "search"}}, m{"tool": m{"name": "search"}}), h)
			if err != nil {
				t.Fatal(err)
			}
			if string(out.LastToolError) != string(tc.want) {
				t.Errorf("lastToolError %s, want %s", out.LastToolError, tc.want)
			}
			if diff := cmp.Diff([]string{`"fine"`}, out.AssistantTexts); diff != "" {
				t.Errorf("assistant texts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestToolRejectedWithoutError: a refusal without an error still reports a
// structured error.
func TestToolRejectedWithoutError(t *testing.T) {
	h := &host{toolReply: func(bus.ToolCall) (*bus.ToolReply, error) {
		return &bus.ToolReply{V: 1, Status: bus.StatusRejected}, nil
	}}
	if _, err := play(t, script(t, m{"tool": m{"name": "x"}}), h); err != nil {
		t.Fatal(err)
	}
	var e teamster.Error
	if err := json.Unmarshal(h.terminals[0].Error, &e); err != nil || e.Code != teamster.CodeHarnessFailed {
		t.Errorf("terminal error %s (%v), want a harness_failed error", h.terminals[0].Error, err)
	}
}

func TestHostErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *host
		step any
		want teamster.Code
	}{
		{"tool plain error", &host{toolReply: func(bus.ToolCall) (*bus.ToolReply, error) { return nil, errors.New("no responders") }},
			m{"tool": m{"name": "x"}}, teamster.CodeHarnessFailed},
		{"tool teamster error", &host{toolReply: func(bus.ToolCall) (*bus.ToolReply, error) {
			return nil, teamster.Errorf(teamster.CodeDeadlineExceeded, "no answer")
		}}, m{"tool": m{"name": "x"}}, teamster.CodeDeadlineExceeded},
		{"tool no reply", &host{toolReply: func(bus.ToolCall) (*bus.ToolReply, error) { return nil, nil }},
			m{"tool": m{"name": "x"}}, teamster.CodeHarnessFailed},
		{"terminal error", &host{terminalReply: func(bus.ToolTerminal) (*bus.ToolTerminalReply, error) { return nil, errors.New("down") }},
			m{"tool": m{"name": "x"}}, teamster.CodeHarnessFailed},
		{"terminal rejected", &host{terminalReply: func(bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
			return &bus.ToolTerminalReply{V: 1, Status: bus.StatusRejected, Error: teamster.Errorf(teamster.CodeInvalidRequest, "unknown call")}, nil
		}}, m{"tool": m{"name": "x"}}, teamster.CodeHarnessFailed},
		{"usage", &host{usageErr: teamster.Errorf(teamster.CodeDeadlineExceeded, "late")}, m{"usage": 1}, teamster.CodeDeadlineExceeded},
		{"emit", &host{emitErr: errors.New("publish failed")}, m{"say": "x"}, teamster.CodeHarnessFailed},
		{"wrapped teamster error", &host{emitErr: errors.Join(errors.New("publish"), teamster.ErrLeaseLost)}, m{"say": "x"}, teamster.CodeLeaseLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := play(t, script(t, tc.step), tc.h)
			if out != nil {
				t.Errorf("a failed attempt returned an outcome %+v", out)
			}
			wantCode(t, err, tc.want)
		})
	}
}

func TestUsageResponseIDs(t *testing.T) {
	h := &host{}
	if _, err := play(t, script(t, m{"usage": 10}, m{"say": "x"}, m{"usage": 0}, m{"usage": 5}), h); err != nil {
		t.Fatal(err)
	}
	want := []usageCall{{"resp-1", 10}, {"resp-2", 0}, {"resp-3", 5}}
	if diff := cmp.Diff(want, h.usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

func TestFail(t *testing.T) {
	h := &host{}
	out, err := play(t, script(t, m{"say": "before"}, m{"fail": "tool 50% broke"}, m{"say": "after"}), h)
	if out != nil {
		t.Errorf("outcome %+v, want none", out)
	}
	wantCode(t, err, teamster.CodeHarnessFailed)
	if err.(*teamster.Error).Message != "tool 50% broke" {
		t.Errorf("message %q, want the script's", err.(*teamster.Error).Message)
	}
	if diff := cmp.Diff([]event{{"partial", `{"text":"before"}`}}, h.Events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestInvalidScripts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prompt string
		parts  []string
	}{
		{"not JSON", `{"script": [`, nil},
		{"trailing data", `{"script": []} x`, nil},
		{"script not a list", `{"script": {"say": "x"}}`, []string{"list"}},
		{"script null", `{"script": null}`, []string{"list"}},
		{"script string", `{"script": "say"}`, []string{"list"}},
		{"step not an object", `{"script": [{"say": "ok"}, "say"]}`, []string{"script[1]"}},
		{"step null", `{"script": [null]}`, []string{"script[0]"}},
		{"empty step", `{"script": [{}]}`, []string{"script[0]", "one key"}},
		{"two keys", `{"script": [{"say": "a", "plan": "b"}]}`, []string{"script[0]", "one key"}},
		{"unknown step", `{"script": [{"say": "a"}, {"say": "b"}, {"dance": 1}]}`, []string{"script[2]", `"dance"`}},
		{"say number", `{"script": [{"say": 1}]}`, []string{"script[0]", "say takes a string"}},
		{"say null", `{"script": [{"say": null}]}`, []string{"script[0]", "say takes a string"}},
		{"reason list", `{"script": [{"reason": ["a"]}]}`, []string{"reason takes a string"}},
		{"plan bool", `{"script": [{"plan": true}]}`, []string{"plan takes a string"}},
		{"fail object", `{"script": [{"fail": {}}]}`, []string{"fail takes a string"}},
		{"sleep string", `{"script": [{"sleep": "10"}]}`, []string{"sleep takes an integer"}},
		{"sleep fraction", `{"script": [{"sleep": 1.5}]}`, []string{"sleep takes an integer"}},
		{"sleep negative", `{"script": [{"sleep": -1}]}`, []string{"sleep takes milliseconds"}},
		{"sleep too long", `{"script": [{"sleep": 86400001}]}`, []string{"sleep takes milliseconds"}},
		{"sleep overflow", `{"script": [{"sleep": 99999999999999999999}]}`, []string{"sleep takes an integer"}},
		{"usage null", `{"script": [{"usage": null}]}`, []string{"usage takes an integer"}},
		{"awaitInjection string", `{"script": [{"awaitInjection": "x"}]}`, []string{"awaitInjection takes an integer"}},
		{"tool string", `{"script": [{"tool": "search"}]}`, []string{"tool takes an object"}},
		{"tool without name", `{"script": [{"tool": {"args": {}}}]}`, []string{"tool.name takes a string"}},
		{"tool empty name", `{"script": [{"tool": {"name": ""}}]}`, []string{"tool.name is empty"}},
		{"tool name number", `{"script": [{"tool": {"name": 3}}]}`, []string{"tool.name takes a string"}},
		{"tool args list", `{"script": [{"tool": {"name": "x", "args": [1]}}]}`, []string{"tool.args is not an object"}},
		{"ask string", `{"script": [{"ask": "why?"}]}`, []string{"ask takes an object"}},
		{"write outside", `{"script": [{"write": {"path": "../x", "text": "a"}}]}`, []string{"not a relative path inside the workspace"}},
		{"write absolute", `{"script": [{"write": {"path": "/tmp/x", "text": "a"}}]}`, []string{"not a relative path inside the workspace"}},
		{"write two contents", `{"script": [{"write": {"path": "x", "text": "a", "base64": "YQ=="}}]}`, []string{"write takes"}},
		{"write no content", `{"script": [{"write": {"path": "x"}}]}`, []string{"write takes"}},
		{"write bad base64", `{"script": [{"write": {"path": "x", "base64": "%%"}}]}`, []string{"not base64"}},
		{"ask without question", `{"script": [{"ask": {"choices": ["a"]}}]}`, []string{"ask.question takes a string"}},
		{"ask empty question", `{"script": [{"ask": {"question": ""}}]}`, []string{"ask.question is empty"}},
		{"ask choices not strings", `{"script": [{"ask": {"question": "?", "choices": [1]}}]}`, []string{"ask takes an object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &host{}
			out, err := play(t, tc.prompt, h)
			if out != nil {
				t.Errorf("outcome %+v, want none", out)
			}
			wantCode(t, err, teamster.CodeHarnessFailed, tc.parts...)
			if len(h.Events()) != 0 || len(h.calls) != 0 || len(h.usage) != 0 {
				t.Errorf("an invalid script reached the host: events %v calls %v usage %v", h.events, h.calls, h.usage)
			}
		})
	}
}

// TestContextEnds checks that a long step returns as soon as the context is
// done, with the error the context's end implies. The steps wait an hour, so
// a run that ignored the context would hang the test.
func TestContextEnds(t *testing.T) {
	for _, step := range []any{m{"sleep": 3_600_000}, m{"awaitInjection": 3_600_000}} {
		for _, tc := range []struct {
			name string
			// end returns a context and what ends it once the run is waiting.
			end  func(t *testing.T) (context.Context, func())
			want teamster.Code
		}{
			{"cancel", func(t *testing.T) (context.Context, func()) {
				ctx, cancel := context.WithCancel(context.Background())
				return ctx, cancel
			}, teamster.CodeCancelled},
			{"deadline", func(t *testing.T) (context.Context, func()) {
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(20*time.Millisecond))
				t.Cleanup(cancel)
				return ctx, func() {}
			}, teamster.CodeDeadlineExceeded},
			{"drain timeout", func(t *testing.T) (context.Context, func()) {
				ctx, cancel := context.WithCancelCause(context.Background())
				return ctx, func() { cancel(teamster.ErrDrainTimeout) }
			}, teamster.CodeDrainTimeout},
			{"lease lost", func(t *testing.T) (context.Context, func()) {
				ctx, cancel := context.WithCancelCause(context.Background())
				return ctx, func() { cancel(teamster.Errorf(teamster.CodeLeaseLost, "renewal failed")) }
			}, teamster.CodeLeaseLost},
			{"plain cause", func(t *testing.T) (context.Context, func()) {
				ctx, cancel := context.WithCancelCause(context.Background())
				return ctx, func() { cancel(errors.New("shutdown")) }
			}, teamster.CodeCancelled},
		} {
			name := tc.name
			for k := range step.(m) {
				name = k + "/" + name
			}
			t.Run(name, func(t *testing.T) {
				ctx, end := tc.end(t)
				h := &host{}
				ready := signalOn(h, "ready")
				done := start(ctx, scripted.New(manifest("v2"), scripted.Options{}), newRun(script(t, m{"say": "ready"}, step, m{"say": "never"}), h))
				var r result
				select {
				case <-ready:
					end()
					r = <-done
				case r = <-done: // a deadline may pass before "ready"
				}
				if r.out != nil {
					t.Errorf("outcome %+v, want none", r.out)
				}
				wantCode(t, r.err, tc.want)
				if n := len(h.Events()); n > 1 {
					t.Errorf("%d events, want at most ready's", n)
				}
			})
		}
	}
}

func TestContextDoneBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(teamster.ErrDrainTimeout)
	h := &host{}
	_, err := scripted.New(manifest("none"), scripted.Options{}).RunAttempt(ctx, newRun("hello", h))
	wantCode(t, err, teamster.CodeDrainTimeout)
	if len(h.Events()) != 0 {
		t.Errorf("events %v, want none", h.Events())
	}
}

func TestBadRun(t *testing.T) {
	hs := scripted.New(manifest("none"), scripted.Options{})
	_, err := hs.RunAttempt(context.Background(), nil)
	wantCode(t, err, teamster.CodeHarnessFailed)
	_, err = hs.RunAttempt(context.Background(), &harness.Run{Host: &host{}})
	wantCode(t, err, teamster.CodeHarnessFailed)
	_, err = hs.RunAttempt(context.Background(), newRun("hi", nil))
	wantCode(t, err, teamster.CodeHarnessFailed)
}

func TestBinding(t *testing.T) {
	for _, tc := range []struct {
		name string
		prev json.RawMessage
		want string
	}{
		{"fresh session", nil, `{"thread":"scripted-s1","turns":1}`},
		{"after one turn", json.RawMessage(`{"thread":"scripted-s1","turns":1}`), `{"thread":"scripted-s1","turns":2}`},
		{"after many", json.RawMessage(`{"thread":"scripted-s1","turns":41}`), `{"thread":"scripted-s1","turns":42}`},
		{"foreign binding", json.RawMessage(`{"resume":"tok"}`), `{"thread":"scripted-s1","turns":1}`},
		{"not an object", json.RawMessage(`"x"`), `{"thread":"scripted-s1","turns":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun("hi", &host{})
			run.Binding = tc.prev
			out, err := scripted.New(manifest("none"), scripted.Options{}).RunAttempt(context.Background(), run)
			if err != nil {
				t.Fatal(err)
			}
			if string(out.NativeSession) != tc.want {
				t.Errorf("binding %s, want %s", out.NativeSession, tc.want)
			}
		})
	}

	// The binding flows from turn to turn.
	hs := scripted.New(manifest("none"), scripted.Options{})
	var prev json.RawMessage
	for turn := 1; turn <= 3; turn++ {
		run := newRun("hi", &host{})
		run.Binding = prev
		out, err := hs.RunAttempt(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		var b struct{ Turns int }
		if err := json.Unmarshal(out.NativeSession, &b); err != nil || b.Turns != turn {
			t.Fatalf("turn %d: binding %s", turn, out.NativeSession)
		}
		prev = out.NativeSession
	}
}

func TestManifestSupportsReset(t *testing.T) {
	m := selection.Manifest{ID: "codex", PluginID: "codex", Injection: "v2"}
	hs := scripted.New(m, scripted.Options{})
	if diff := cmp.Diff(m, hs.Manifest()); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	a := &bus.Attempt{Provider: "openai", ModelID: "gpt", ModelProvider: &selection.Route{
		RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}}}}
	if ok, why := hs.Supports(a); !ok {
		t.Errorf("Supports = false (%s), want true", why)
	}
	if ok, _ := hs.Supports(&bus.Attempt{Provider: "openai", ModelID: "gpt"}); ok {
		t.Errorf("Supports a route without a policy = true, want false")
	}
	var r harness.Resetter = hs
	if err := r.Reset(context.Background(), "agent:main:s1", json.RawMessage(`{"turns":1}`)); err != nil {
		t.Errorf("Reset: %v", err)
	}
}

func TestRuntimeArtifact(t *testing.T) {
	hs := scripted.New(manifest("none"), scripted.Options{})
	run := newRun("hi", &host{})
	run.Attempt.CaptureRuntimeArtifact = true
	out, err := hs.RunAttempt(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	want := bus.RuntimeArtifact{ID: "codex", Fingerprint: "scripted/1"}
	if out.RuntimeArtifact == nil || *out.RuntimeArtifact != want {
		t.Fatalf("artifact %+v, want %+v", out.RuntimeArtifact, want)
	}
	if err := hs.ValidateRuntimeArtifact(context.Background(), want); err != nil {
		t.Errorf("validating its own artifact: %v", err)
	}
	wantCode(t, hs.ValidateRuntimeArtifact(context.Background(), bus.RuntimeArtifact{ID: "codex", Fingerprint: "other"}), teamster.CodeRuntimeArtifactMismatch)

	h := &host{}
	run = newRun("hi", h)
	run.Attempt.ExpectedRuntimeArtifact = &bus.RuntimeArtifact{ID: "codex", Fingerprint: "other"}
	_, err = hs.RunAttempt(context.Background(), run)
	wantCode(t, err, teamster.CodeRuntimeArtifactMismatch)
	if len(h.Events()) != 0 {
		t.Errorf("a mismatched artifact ran: events %v", h.Events())
	}
	run = newRun("hi", &host{})
	run.Attempt.ExpectedRuntimeArtifact = &want
	if _, err := hs.RunAttempt(context.Background(), run); err != nil {
		t.Errorf("the expected artifact: %v", err)
	}
}
