package client

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Tools, a Host a gateway fills with tool functions.

// ToolFunc is one host tool: it gets the call's arguments and returns a
// result (encoded as JSON) or an error.
type ToolFunc func(ctx context.Context, args json.RawMessage) (any, error)

// Tools is a Host with a registry of tools. It keeps, per attempt, the
// host's canonical last tool error: a failure of a tool stands until that
// same tool succeeds, whatever other tools do meanwhile (OpenClaw's rule for
// mutating failures). UserInput answers with Answer, when set.
type Tools struct {
	mu    sync.Mutex
	tools map[string]ToolFunc
	last  map[string]json.RawMessage // attempt -> last tool error
	lastN map[string]string          // attempt -> name of the failed tool
	usage map[string]int64           // attempt -> output tokens reported
	// Answer answers user input questions; nil refuses them.
	Answer func(ctx context.Context, attemptID string, q bus.UserInput) (string, error)
}

// NewTools returns an empty tool registry.
func NewTools() *Tools {
	return &Tools{tools: map[string]ToolFunc{}, last: map[string]json.RawMessage{}, lastN: map[string]string{}, usage: map[string]int64{}}
}

// Register adds (or replaces) a tool.
func (t *Tools) Register(name string, f ToolFunc) *Tools {
	t.mu.Lock()
	t.tools[name] = f
	t.mu.Unlock()
	return t
}

// Tool runs a registered tool.
func (t *Tools) Tool(ctx context.Context, _ string, call bus.ToolCall) (json.RawMessage, error) {
	t.mu.Lock()
	f, ok := t.tools[call.Name]
	t.mu.Unlock()
	if !ok {
		return nil, teamster.Errorf(teamster.CodeInvalidRequest, "the host has no tool %q", call.Name)
	}
	res, err := f(ctx, call.Args)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("tool %s result: %w", call.Name, err)
	}
	return b, nil
}

// ToolTerminal applies the canonical settlement: a failure becomes the last
// tool error; a success of the tool that failed clears it.
func (t *Tools) ToolTerminal(_ context.Context, attemptID string, term bus.ToolTerminal) (json.RawMessage, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch term.Outcome {
	case bus.OutcomeFailure:
		b, _ := json.Marshal(map[string]any{"toolName": term.Name, "callId": term.CallID, "error": json.RawMessage(orNull(term.Error)),
			"executionStarted": term.ExecutionStarted})
		t.last[attemptID] = b
		t.lastN[attemptID] = term.Name
	case bus.OutcomeSuccess:
		if t.lastN[attemptID] == term.Name {
			delete(t.last, attemptID)
			delete(t.lastN, attemptID)
		}
	}
	return t.last[attemptID], nil
}

func orNull(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// UserInput answers with Answer.
func (t *Tools) UserInput(ctx context.Context, attemptID string, q bus.UserInput) (string, error) {
	if t.Answer == nil {
		return "", teamster.Errorf(teamster.CodeInvalidRequest, "this host answers no questions")
	}
	return t.Answer(ctx, attemptID, q)
}

// Usage adds up the reported output tokens per attempt (Reported reads them).
func (t *Tools) Usage(_ context.Context, attemptID string, u bus.UsageReport) error {
	t.mu.Lock()
	t.usage[attemptID] += u.OutputTokens
	t.mu.Unlock()
	return nil
}

// Forget drops what the registry keeps for an attempt (its last tool error
// and usage); call it once the attempt's result has arrived.
func (t *Tools) Forget(attemptID string) {
	t.mu.Lock()
	delete(t.last, attemptID)
	delete(t.lastN, attemptID)
	delete(t.usage, attemptID)
	t.mu.Unlock()
}

// Reported is the output tokens reported for an attempt.
func (t *Tools) Reported(attemptID string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.usage[attemptID]
}
