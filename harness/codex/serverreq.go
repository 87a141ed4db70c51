package codex

import (
	"encoding/json"
	"fmt"

	"github.com/sirupsen/logrus"

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
	text, isError := t.rel.Tool(t.log, p.CallID, name, t.tools[name], p.Arguments)
	if isError {
		return toolFailure(text)
	}
	return dynamicToolCallResult{Success: true, ContentItems: []toolContent{{Type: "inputText", Text: text}}}
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
	t.rel.Emit(bus.EventAgent, bus.ApprovalData{Kind: bus.AgentApproval, Request: m.Method, Decision: decision})
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
