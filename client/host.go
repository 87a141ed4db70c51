package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Host is what a gateway implements to answer the host callbacks of the
// attempts it submits with its hostId: OpenClaw keeps the tool list, tool
// policy, approvals and usage accounting on the host, so a harness running on
// a remote worker calls back here through the fleet.
type Host interface {
	// Tool invokes a host tool with the arguments that reached it. A
	// *teamster.Error (or any error) is a refusal the harness sees.
	Tool(ctx context.Context, attemptID string, call bus.ToolCall) (json.RawMessage, error)
	// ToolTerminal records one tool call's terminal outcome and returns the
	// host's canonical settlement: the last tool error still standing
	// (empty when none).
	ToolTerminal(ctx context.Context, attemptID string, t bus.ToolTerminal) (lastToolError json.RawMessage, err error)
	// UserInput answers a blocking question.
	UserInput(ctx context.Context, attemptID string, q bus.UserInput) (string, error)
	// Usage records the output tokens of one completed model response.
	Usage(ctx context.Context, attemptID string, u bus.UsageReport) error
}

// HostServer serves a Host on teamster.host.<hostId>.>.
type HostServer struct {
	sub *nats.Subscription
}

// ServeHost answers the host callbacks of attempts submitted with hostID.
// Each request is handled in its own goroutine; a handler's deadline is the
// attempt's own (the worker gives up at it), so handlers should honour ctx.
func (c *Client) ServeHost(hostID string, h Host) (*HostServer, error) {
	subj, err := bus.HostSubjects(hostID)
	if err != nil {
		return nil, err
	}
	prefix := "teamster.host." + hostID + "."
	sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
		go serveHostCall(m, prefix, h)
	})
	if err != nil {
		return nil, err
	}
	return &HostServer{sub: sub}, nil
}

// Stop stops answering; calls in hand finish.
func (s *HostServer) Stop() error { return s.sub.Drain() }

func serveHostCall(m *nats.Msg, prefix string, h Host) {
	rest := strings.TrimPrefix(m.Subject, prefix)
	attemptID, call, ok := strings.Cut(rest, ".")
	if !ok || !bus.ValidID(attemptID) {
		reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInvalidRequest, "not a host callback subject")))
		return
	}
	ctx := context.Background()
	switch call {
	case bus.HostCallTool:
		var req bus.ToolCall
		if err := bus.Decode(m.Data, &req); err != nil {
			reply(m, &bus.ToolReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		res, err := h.Tool(ctx, attemptID, req)
		if err != nil {
			reply(m, &bus.ToolReply{V: bus.Version, Status: bus.StatusRejected, Error: toolError(err)})
			return
		}
		reply(m, &bus.ToolReply{V: bus.Version, Status: bus.StatusOK, Result: res})
	case bus.HostCallToolTerminal:
		var req bus.ToolTerminal
		if err := bus.Decode(m.Data, &req); err != nil {
			reply(m, &bus.ToolTerminalReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		last, err := h.ToolTerminal(ctx, attemptID, req)
		if err != nil {
			reply(m, &bus.ToolTerminalReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		reply(m, &bus.ToolTerminalReply{V: bus.Version, Status: bus.StatusOK, LastToolError: last})
	case bus.HostCallUserInput:
		var req bus.UserInput
		if err := bus.Decode(m.Data, &req); err != nil {
			reply(m, &bus.UserInputReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		answer, err := h.UserInput(ctx, attemptID, req)
		if err != nil {
			reply(m, &bus.UserInputReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		reply(m, &bus.UserInputReply{V: bus.Version, Status: bus.StatusOK, Answer: answer})
	case bus.HostCallUsage:
		var req bus.UsageReport
		if err := bus.Decode(m.Data, &req); err != nil {
			reply(m, bus.Rejected(err))
			return
		}
		if err := h.Usage(ctx, attemptID, req); err != nil {
			reply(m, bus.Rejected(err))
			return
		}
		reply(m, bus.OK())
	default:
		reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInvalidRequest, "unknown host call %q", call)))
	}
}

// toolError is how a tool's failure travels: a *teamster.Error keeps its
// code; any other error is harness_failed with its text.
func toolError(err error) *teamster.Error {
	var te *teamster.Error
	if errors.As(err, &te) {
		return te
	}
	return teamster.Errorf(teamster.CodeHarnessFailed, "%v", err)
}

func reply(m *nats.Msg, v any) {
	if b, err := bus.Encode(v); err == nil {
		_ = m.Respond(b)
	}
}

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
