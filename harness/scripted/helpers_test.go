package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/injection"
	"github.com/teamster-fleet/teamster/selection"
)

// event is one Emit call the host double saw, its data encoded as JSON.
type event struct {
	Type string
	Data string
}

// usageCall is one ReportUsage call the host double saw.
type usageCall struct {
	ResponseID   string
	OutputTokens int64
}

// host is a recording test double for harness.Host: it records every call and
// answers tool and toolTerminal callbacks with canned replies (by default ok,
// result {"ok":true}, no lastToolError). It stands in for the gateway at the
// end of the host callback subjects, not for NATS or Redis.
type host struct {
	mu        sync.Mutex
	events    []event
	calls     []bus.ToolCall
	terminals []bus.ToolTerminal
	usage     []usageCall
	questions []bus.UserInput

	// onEmit, when set, is called after an event is recorded, on the run's
	// goroutine.
	onEmit func(event)
	// toolReply and terminalReply, when set, answer the callbacks.
	toolReply     func(bus.ToolCall) (*bus.ToolReply, error)
	terminalReply func(bus.ToolTerminal) (*bus.ToolTerminalReply, error)
	// userInputReply, when set, answers questions; without it they fail.
	userInputReply func(bus.UserInput) (*bus.UserInputReply, error)
	// emitErr and usageErr, when set, are what Emit and ReportUsage return.
	emitErr  error
	usageErr error
}

func (h *host) Emit(ctx context.Context, eventType string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	e := event{Type: eventType, Data: string(b)}
	h.mu.Lock()
	h.events = append(h.events, e)
	f := h.onEmit
	h.mu.Unlock()
	if f != nil {
		f(e)
	}
	return h.emitErr
}

func (h *host) Tool(ctx context.Context, call bus.ToolCall) (*bus.ToolReply, error) {
	h.mu.Lock()
	h.calls = append(h.calls, call)
	h.mu.Unlock()
	if h.toolReply != nil {
		return h.toolReply(call)
	}
	return &bus.ToolReply{V: 1, Status: bus.StatusOK, Result: json.RawMessage(`{"ok":true}`)}, nil
}

func (h *host) ToolTerminal(ctx context.Context, t bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
	h.mu.Lock()
	h.terminals = append(h.terminals, t)
	h.mu.Unlock()
	if h.terminalReply != nil {
		return h.terminalReply(t)
	}
	return &bus.ToolTerminalReply{V: 1, Status: bus.StatusOK}, nil
}

func (h *host) UserInput(ctx context.Context, q bus.UserInput) (*bus.UserInputReply, error) {
	h.mu.Lock()
	h.questions = append(h.questions, q)
	h.mu.Unlock()
	if h.userInputReply != nil {
		return h.userInputReply(q)
	}
	return nil, errors.New("this test's host answers no questions")
}

func (h *host) ReportUsage(ctx context.Context, responseID string, outputTokens int64) error {
	h.mu.Lock()
	h.usage = append(h.usage, usageCall{responseID, outputTokens})
	h.mu.Unlock()
	return h.usageErr
}

// Events returns the events recorded so far.
func (h *host) Events() []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]event(nil), h.events...)
}

// manifest is the manifest of the harness under test, with injection level inj.
func manifest(inj string) selection.Manifest {
	return selection.Manifest{ID: "codex", PluginID: "codex", Injection: inj}
}

// newRun returns a run of an attempt with prompt on h.
func newRun(prompt string, h harness.Host) *harness.Run {
	return &harness.Run{
		Attempt: &bus.Attempt{
			V: 1, AttemptID: "a1", SessionKey: "agent:main:s1", SessionID: "s1",
			AgentID: "main", Provider: "openai", ModelID: "gpt", Prompt: prompt,
		},
		Host: h, WorkerID: "w1", Fence: "e1:1",
	}
}

// script returns the prompt {"script": steps}.
func script(t testing.TB, steps ...any) string {
	t.Helper()
	if steps == nil {
		steps = []any{}
	}
	b, err := json.Marshal(map[string]any{"script": steps})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// m is one script step (or any JSON object) under construction.
type m = map[string]any

// play runs prompt on a fresh harness with injection level "none".
func play(t *testing.T, prompt string, h *host) (*harness.Outcome, error) {
	t.Helper()
	return scripted.New(manifest("none"), scripted.Options{}).RunAttempt(context.Background(), newRun(prompt, h))
}

// wantCode checks that err is a *teamster.Error (not wrapped) with code, and
// that its message contains each of parts.
func wantCode(t *testing.T, err error, code teamster.Code, parts ...string) {
	t.Helper()
	te, ok := err.(*teamster.Error)
	if !ok {
		t.Fatalf("error %v (%T) is not a *teamster.Error", err, err)
	}
	if te.Code != code {
		t.Fatalf("error %v has code %s, want %s", err, te.Code, code)
	}
	for _, p := range parts {
		if !strings.Contains(te.Message, p) {
			t.Errorf("error message %q does not contain %q", te.Message, p)
		}
	}
}

// recorder records the admission and settlement callbacks of queued input.
type recorder struct {
	mu       sync.Mutex
	accepted []bool
	settled  []injection.Settlement
	// order records "accepted" and settlements as they happen.
	order []string
}

func (r *recorder) opts() injection.QueueOptions {
	return injection.QueueOptions{
		OnQueueAccepted: func(ok bool) {
			r.mu.Lock()
			r.accepted = append(r.accepted, ok)
			r.order = append(r.order, "accepted")
			r.mu.Unlock()
		},
		OnQueueSettled: func(s injection.Settlement) {
			r.mu.Lock()
			r.settled = append(r.settled, s)
			r.order = append(r.order, string(s))
			r.mu.Unlock()
		},
	}
}

func (r *recorder) Order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// result is what RunAttempt returned.
type result struct {
	out *harness.Outcome
	err error
}

// start runs the attempt in a goroutine; the channel yields its result.
func start(ctx context.Context, h *scripted.Harness, run *harness.Run) <-chan result {
	ch := make(chan result, 1)
	go func() {
		out, err := h.RunAttempt(ctx, run)
		ch <- result{out, err}
	}()
	return ch
}

// signalOn returns a channel closed when the host emits a partial with text.
func signalOn(h *host, text string) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	want, _ := json.Marshal(map[string]string{"text": text})
	h.onEmit = func(e event) {
		if e.Type == bus.EventPartial && e.Data == string(want) {
			once.Do(func() { close(ch) })
		}
	}
	return ch
}
