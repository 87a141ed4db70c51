package codex

import (
	"encoding/json"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Server requests: the app-server asks the harness to run a dynamic tool
// (item/tool/call) or to approve something. Each is answered in its own
// goroutine, so a slow host tool never holds up the turn's events (or its
// cancellation); the turn waits for all of them before it returns.

// serve answers one server request.
func (t *turn) serve(m *message) {
	if t.ended.Load() {
		_ = t.c.respondError(m.ID, codeInvalidParams, "the teamster run of this turn has ended")
		return
	}
	t.handlers.Add(1)
	go func() {
		defer t.handlers.Done()
		res, rerr := t.answer(m)
		var err error
		if rerr != nil {
			err = t.c.respondError(m.ID, rerr.Code, rerr.Message)
		} else {
			err = t.c.respond(m.ID, res)
		}
		if err != nil {
			t.log.WithError(err).WithField("request", m.Method).Debug("codex: server request not answered")
		}
	}()
}

// answer is the result of one server request, or its refusal.
func (t *turn) answer(m *message) (any, *rpcError) {
	switch m.Method {
	case reqDynamicToolCall:
		var p dynamicToolCallParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			return nil, &rpcError{Code: codeInvalidParams, Message: "item/tool/call params do not decode"}
		}
		if p.TurnID != t.turnID {
			return nil, &rpcError{Code: codeInvalidParams, Message: "the tool call is not for the turn this run drives"}
		}
		return t.toolCall(p), nil
	case reqCommandApproval, reqFileChangeApproval, reqLegacyExecApproval, reqLegacyPatchApproval, reqPermissionsApproval:
		return t.approval(m), nil
	case reqMCPElicitation:
		// Nobody is there to fill in an MCP server's form.
		return map[string]any{"action": "decline", "content": nil, "_meta": nil}, nil
	default:
		// item/tool/requestUserInput, auth refreshes, attestation, and
		// whatever later versions add.
		return nil, &rpcError{Code: codeMethodNotFound, Message: fmt.Sprintf("teamster's codex harness does not answer %s", m.Method)}
	}
}

// toolCall runs a dynamic tool through the host's tool callback, emits a
// tool event, reports the terminal outcome through toolTerminal (keeping the
// host's lastToolError), and answers the app-server with the result.
func (t *turn) toolCall(p dynamicToolCallParams) dynamicToolCallResult {
	name := p.Tool
	if p.Namespace != nil && *p.Namespace != "" {
		name = *p.Namespace + "." + p.Tool
	}
	var args json.RawMessage
	if len(p.Arguments) > 0 && string(p.Arguments) != "null" {
		args = p.Arguments
	}
	call := bus.ToolCall{V: bus.Version, CallID: p.CallID, Name: name, Args: args}
	log := t.log.WithFields(logrus.Fields{"tool": name, "callId": p.CallID})

	if !t.tools[name] {
		e := teamster.Errorf(teamster.CodeInvalidRequest, "tool %.80q was not offered to this turn", name)
		errJSON, _ := json.Marshal(e)
		t.emit(bus.EventTool, bus.ToolData{CallID: p.CallID, Name: name, Args: args, Outcome: bus.OutcomeFailure, Error: errJSON})
		t.terminal(call, false, bus.OutcomeFailure, errJSON)
		return toolFailure(e.Message)
	}

	reply, err := t.run.Host.Tool(t.hctx, call)
	if err != nil {
		if t.hctx.Err() != nil {
			return toolFailure("the turn was cancelled before the tool answered")
		}
		t.fail(hostError("tool", err))
		return toolFailure("the host could not run the tool")
	}
	if reply == nil {
		t.fail(failed("the host's tool callback for %s returned no reply", p.CallID))
		return toolFailure("the host could not run the tool")
	}
	ev := bus.ToolData{CallID: p.CallID, Name: name, Args: args}
	var res dynamicToolCallResult
	if reply.Status == bus.StatusOK {
		ev.Outcome = bus.OutcomeSuccess
		ev.Result = reply.Result
		if len(ev.Result) == 0 {
			ev.Result = json.RawMessage("null")
		}
		res = dynamicToolCallResult{Success: true, ContentItems: []toolContent{{Type: "inputText", Text: toolText(ev.Result)}}}
	} else {
		ev.Outcome = bus.OutcomeFailure
		e := reply.Error
		if e == nil {
			e = teamster.Errorf(teamster.CodeHarnessFailed, "the host refused the tool call without an error")
		}
		ev.Error, _ = json.Marshal(e)
		res = toolFailure("the tool failed: " + e.Message)
	}
	log.WithField("outcome", ev.Outcome).Debug("codex: tool call")
	t.emit(bus.EventTool, ev)
	t.terminal(call, true, ev.Outcome, ev.Error)
	return res
}

// terminal reports a tool call's terminal outcome and keeps the host's
// canonical lastToolError.
func (t *turn) terminal(call bus.ToolCall, started bool, outcome string, errJSON json.RawMessage) {
	term, err := t.run.Host.ToolTerminal(t.hctx, bus.ToolTerminal{V: bus.Version, CallID: call.CallID, Name: call.Name,
		Args: call.Args, ExecutionStarted: started, Outcome: outcome, Error: errJSON})
	switch {
	case err != nil:
		if t.hctx.Err() == nil {
			t.fail(hostError("toolTerminal", err))
		}
	case term == nil:
		t.fail(failed("the host's toolTerminal callback for %s returned no reply", call.CallID))
	case term.Status != bus.StatusOK:
		t.fail(failed("the host refused the terminal report of %s: %v", call.CallID, term.Error))
	default:
		t.mu.Lock()
		t.lastToolError = term.LastToolError
		t.mu.Unlock()
	}
}

// toolText is a tool result as the model reads it: a JSON string's text, any
// other JSON value as JSON.
func toolText(result json.RawMessage) string {
	var s string
	if json.Unmarshal(result, &s) == nil {
		return s
	}
	return string(result)
}

func toolFailure(text string) dynamicToolCallResult {
	return dynamicToolCallResult{Success: false, ContentItems: []toolContent{{Type: "inputText", Text: text}}}
}

// approval answers an approval request: declined unless the settings allow
// approvals. The decision is emitted as an agent event.
func (t *turn) approval(m *message) any {
	allow := t.h.s.AllowApprovals
	decision := bus.ApprovalDeclined
	if allow {
		decision = bus.ApprovalAccepted
	}
	t.log.WithFields(logrus.Fields{"request": m.Method, "decision": decision}).Info("codex: approval request")
	t.emit(bus.EventAgent, bus.ApprovalData{Kind: bus.AgentApproval, Request: m.Method, Decision: decision})
	switch m.Method {
	case reqCommandApproval, reqFileChangeApproval:
		if allow {
			return map[string]any{"decision": "accept"}
		}
		return map[string]any{"decision": "decline"}
	case reqLegacyExecApproval, reqLegacyPatchApproval:
		if allow {
			return map[string]any{"decision": "approved"}
		}
		return map[string]any{"decision": map[string]any{"denied": map[string]any{
			"rejection": "declined by the teamster worker (harness setting allowApprovals is off)"}}}
	default: // reqPermissionsApproval
		granted := json.RawMessage(`{}`)
		if allow {
			var p permissionsParams
			if json.Unmarshal(m.Params, &p) == nil && len(p.Permissions) > 0 && string(p.Permissions) != "null" {
				granted = p.Permissions
			}
		}
		return map[string]any{"permissions": granted, "scope": "turn"}
	}
}
