package client

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Serving the host callbacks of the attempts a gateway submits with its host
// id: the harness on a remote worker calls the gateway's tools, asks its
// user, reports usage, through the fleet.

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

// HostAsserter is what a Host also implements to send source-bound input
// under its own authority (bus.InjectRequest.HostAssertion): the worker asks
// it, right before the harness dispatches the item and before every retry,
// whether the assertion still holds. Answer false for an assertion you do
// not know, and keep answering false once you have. A Host that does not
// implement it refuses every assertion, so such input is always dropped.
type HostAsserter interface {
	AssertCurrent(ctx context.Context, attemptID, assertion string) (bool, error)
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
	case bus.HostCallReplyMedia:
		var req bus.ReplyMedia
		if err := bus.Decode(m.Data, &req); err != nil {
			reply(m, bus.Rejected(err))
			return
		}
		if rm, ok := h.(HostReplyMedia); ok {
			if err := rm.ReplyMedia(ctx, attemptID, req); err != nil {
				reply(m, bus.Rejected(err))
				return
			}
		}
		reply(m, bus.OK())
	case bus.HostCallAssertCurrent:
		var req bus.AssertCurrent
		if err := bus.Decode(m.Data, &req); err != nil {
			reply(m, &bus.AssertCurrentReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		a, ok := h.(HostAsserter)
		if !ok {
			reply(m, &bus.AssertCurrentReply{V: bus.Version, Status: bus.StatusRejected,
				Error: teamster.Errorf(teamster.CodeInvalidRequest, "this host makes no assertions")})
			return
		}
		current, err := a.AssertCurrent(ctx, attemptID, req.Assertion)
		if err != nil {
			reply(m, &bus.AssertCurrentReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		reply(m, &bus.AssertCurrentReply{V: bus.Version, Status: bus.StatusOK, Current: current})
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
