package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/injection"
	"github.com/teamster-fleet/teamster/selection"
)

// shout is a minimal harness: it answers the prompt in capitals, after
// asking the host for a tool result and the gateway for a confirmation.
type shout struct{}

// The interfaces a harness implements: Harness always, Resetter when it
// keeps a native binding outside the session record.
var (
	_ harness.Harness  = shout{}
	_ harness.Resetter = shout{}
)

func (shout) Manifest() selection.Manifest {
	return selection.Manifest{ID: "shout", Label: "Shout", PluginID: "shout", Injection: selection.InjectionV1}
}

func (h shout) Supports(a *bus.Attempt) (bool, string) {
	return harness.SupportsManifest(h.Manifest(), a)
}

func (shout) Reset(ctx context.Context, sessionKey string, binding json.RawMessage) error {
	return nil // nothing kept outside the session record
}

func (shout) RunAttempt(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	// Active-run injection: install the handle as soon as the run accepts
	// input; the worker routes inject requests to it.
	in := &inbox{}
	run.SetInjector(in)
	defer in.close()

	host := run.Host
	if run.Current != nil && !run.Current() {
		return nil, teamster.Errorf(teamster.CodeLeaseLost, "shout: the run may no longer act")
	}
	call := bus.ToolCall{V: bus.Version, CallID: "call-1", Name: "greeting"}
	rep, err := host.Tool(ctx, call)
	if err != nil {
		return nil, err
	}
	term, err := host.ToolTerminal(ctx, bus.ToolTerminal{V: bus.Version, CallID: call.CallID, Name: call.Name,
		ExecutionStarted: true, Outcome: bus.OutcomeSuccess})
	if err != nil {
		return nil, err
	}
	ok, err := host.UserInput(ctx, bus.UserInput{V: bus.Version, Question: "Shout it?", Choices: []string{"yes", "no"}})
	if err != nil {
		return nil, err
	}
	var greeting string
	_ = json.Unmarshal(rep.Result, &greeting)
	text := greeting + " " + run.Attempt.Prompt
	if ok.Answer == "yes" {
		text = strings.ToUpper(text)
	}
	if err := host.Emit(ctx, bus.EventPartial, bus.PartialData{Text: text}); err != nil {
		return nil, err
	}
	if err := host.ReportUsage(ctx, "resp-1", int64(len(strings.Fields(text)))); err != nil {
		return nil, err
	}
	return &harness.Outcome{AssistantTexts: []string{text}, LastToolError: term.LastToolError}, nil
}

// inbox is the run's injection.V1 handle: it takes ordinary input while the
// run is active and settles each input once.
type inbox struct {
	mu     sync.Mutex
	closed bool
}

var _ injection.V1 = (*inbox)(nil)

func (b *inbox) QueueMessage(text string, opts injection.QueueOptions) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		injection.Refuse(opts)
		return teamster.Errorf(teamster.CodeNoActiveRun, "shout: the run has ended")
	}
	s := injection.NewSettler(opts)
	s.Accept()
	s.Settle(injection.Committed)
	return nil
}

func (b *inbox) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// printHost stands in for the worker's host: it prints what the harness
// sends and answers the host callbacks as a gateway would.
type printHost struct{}

var _ harness.Host = printHost{}

func (printHost) Emit(ctx context.Context, eventType string, data any) error {
	b, _ := json.Marshal(data)
	fmt.Printf("event %s %s\n", eventType, b)
	return nil
}

func (printHost) Tool(ctx context.Context, call bus.ToolCall) (*bus.ToolReply, error) {
	fmt.Printf("tool %s (%s)\n", call.Name, call.CallID)
	return &bus.ToolReply{V: bus.Version, Status: bus.StatusOK, Result: json.RawMessage(`"hello"`)}, nil
}

func (printHost) ToolTerminal(ctx context.Context, t bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
	fmt.Printf("tool terminal %s: %s\n", t.CallID, t.Outcome)
	return &bus.ToolTerminalReply{V: bus.Version, Status: bus.StatusOK}, nil
}

func (printHost) UserInput(ctx context.Context, q bus.UserInput) (*bus.UserInputReply, error) {
	fmt.Printf("user input %q %v\n", q.Question, q.Choices)
	return &bus.UserInputReply{V: bus.Version, Status: bus.StatusOK, Answer: "yes"}, nil
}

func (printHost) ReportUsage(ctx context.Context, responseID string, outputTokens int64) error {
	fmt.Printf("usage %s: %d output tokens\n", responseID, outputTokens)
	return nil
}

// A harness implements harness.Harness; the worker checks Supports, runs
// the attempt with a Run whose Host reaches the gateway, and reaches the
// run's injection handle once the harness installed it. A harness's own
// tests can drive it the same way, with a Host of their own.
func Example() {
	var h harness.Harness = shout{}
	a := &bus.Attempt{V: bus.Version, AttemptID: "01J00000000000000000000001", SessionKey: "s", Prompt: "world",
		Routes: []selection.Route{{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"shout"}}}}}
	if ok, why := h.Supports(a); !ok {
		fmt.Println("unsupported:", why)
		return
	}
	_, why := h.Supports(&bus.Attempt{})
	fmt.Println("an attempt without routes:", why)

	run := &harness.Run{Attempt: a, Host: printHost{}, WorkerID: "w1", Fence: "1", Current: func() bool { return true }}
	run.OnInjector(func(handle any) { // what the worker does
		_, v1 := handle.(injection.V1)
		fmt.Println("injection handle installed, V1:", v1)
	})
	out, err := h.RunAttempt(context.Background(), run)
	if err != nil {
		fmt.Println("run failed:", err)
		return
	}
	fmt.Printf("assistant %q, classification %q\n", out.AssistantTexts, out.Classification())

	// The handle outlives the run but refuses input once it has ended.
	err = run.Injector().(injection.V1).QueueMessage("more", injection.QueueOptions{
		OnQueueSettled: func(s injection.Settlement) { fmt.Println("late input settled", s) },
	})
	fmt.Println("late input refused:", errors.Is(err, &teamster.Error{Code: teamster.CodeNoActiveRun}))
	// Output:
	// an attempt without routes: no prepared route
	// injection handle installed, V1: true
	// tool greeting (call-1)
	// tool terminal call-1: success
	// user input "Shout it?" [yes no]
	// event partial {"text":"HELLO WORLD"}
	// usage resp-1: 2 output tokens
	// assistant ["HELLO WORLD"], classification ""
	// late input settled rejected
	// late input refused: true
}
