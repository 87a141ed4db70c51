package claude

import (
	"context"
	"encoding/json"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// toolCall runs one gateway tool the model called through the turn's MCP
// server: Host.Tool, a tool event, then Host.ToolTerminal (whose
// lastToolError the outcome keeps). It returns what the model is told and
// whether that is an error. offered says the name is one of the turn's
// tools; any other is refused without reaching the host.
func (t *turn) toolCall(_ context.Context, callID, name string, offered bool, rawArgs json.RawMessage) (string, bool) {
	t.handlers.Add(1)
	defer t.handlers.Done()
	if t.ended.Load() && t.hctx.Err() != nil {
		return "the teamster run of this turn has ended", true
	}
	var args json.RawMessage
	if len(rawArgs) > 0 && string(rawArgs) != "null" {
		args = rawArgs
	}
	call := bus.ToolCall{V: bus.Version, CallID: callID, Name: name, Args: args}
	log := t.log.WithFields(logrus.Fields{"tool": name, "callId": callID})

	if !offered || !t.tools[name] {
		e := teamster.Errorf(teamster.CodeInvalidRequest, "tool %.80q was not offered to this turn", name)
		errJSON, _ := json.Marshal(e)
		t.emit(bus.EventTool, bus.ToolData{CallID: callID, Name: name, Args: args, Outcome: bus.OutcomeFailure, Error: errJSON})
		t.terminal(call, false, bus.OutcomeFailure, errJSON)
		return e.Message, true
	}
	t.toolRan.Store(true)
	reply, err := t.run.Host.Tool(t.hctx, call)
	if err != nil {
		if t.hctx.Err() != nil {
			return "the turn was cancelled before the tool answered", true
		}
		t.fail(hostError("tool", err))
		return "the host could not run the tool", true
	}
	if reply == nil {
		t.fail(failed("the host's tool callback for %s returned no reply", callID))
		return "the host could not run the tool", true
	}
	ev := bus.ToolData{CallID: callID, Name: name, Args: args}
	var text string
	isError := false
	if reply.Status == bus.StatusOK {
		ev.Outcome = bus.OutcomeSuccess
		ev.Result = reply.Result
		if len(ev.Result) == 0 {
			ev.Result = json.RawMessage("null")
		}
		text = toolText(ev.Result)
	} else {
		ev.Outcome = bus.OutcomeFailure
		e := reply.Error
		if e == nil {
			e = teamster.Errorf(teamster.CodeHarnessFailed, "the host refused the tool call without an error")
		}
		ev.Error, _ = json.Marshal(e)
		text, isError = "the tool failed: "+e.Message, true
	}
	log.WithField("outcome", ev.Outcome).Debug("claude: tool call")
	t.emit(bus.EventTool, ev)
	t.terminal(call, true, ev.Outcome, ev.Error)
	return text, isError
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
