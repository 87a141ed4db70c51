package nativecli

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
)

// Relay is a turn's side of the Host contract: it emits the turn's events,
// reports its usage and relays its tool calls to the host, keeps the host's
// lastToolError, and keeps the turn's first failure (a host that cannot take
// a callback fails the turn). It is safe for concurrent use.
type Relay struct {
	host harness.Host
	ctx  context.Context
	errs Errors

	mu            sync.Mutex
	lastToolError json.RawMessage
	failErr       error
	failed        chan struct{} // closed by the first Fail
}

// NewRelay returns the relay of a turn whose host callbacks run under ctx
// (which ends with the turn's context or when the turn is being aborted; a
// callback that fails once ctx ended does not fail the turn).
func NewRelay(host harness.Host, ctx context.Context, errs Errors) *Relay {
	return &Relay{host: host, ctx: ctx, errs: errs, failed: make(chan struct{})}
}

// Fail ends the turn with err (the first failure wins): Failed closes.
func (r *Relay) Fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failErr == nil {
		r.failErr = err
		close(r.failed)
	}
}

// Failed is closed by the first Fail.
func (r *Relay) Failed() <-chan struct{} { return r.failed }

// Failure is the first failure, nil before any.
func (r *Relay) Failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failErr
}

// LastToolError is the host's canonical settlement of the turn's last failed
// tool call, as the last ToolTerminal returned it.
func (r *Relay) LastToolError() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastToolError
}

// Emit sends an event; a host that cannot take it ends the turn.
func (r *Relay) Emit(eventType string, data any) {
	if err := r.host.Emit(r.ctx, eventType, data); err != nil && r.ctx.Err() == nil {
		r.Fail(r.errs.Host("emit", err))
	}
}

// ReportUsage reports one completed response's output tokens through the
// host (which de-duplicates by response id and emits the usage event).
func (r *Relay) ReportUsage(responseID string, tokens int64) {
	if tokens <= 0 {
		return
	}
	if err := r.host.ReportUsage(r.ctx, responseID, tokens); err != nil && r.ctx.Err() == nil {
		r.Fail(r.errs.Host("usage", err))
	}
}

// Tool runs one tool call the model made through the host: Host.Tool, a
// tool event, then Host.ToolTerminal (whose lastToolError the relay keeps).
// It returns what the model is told and whether that is an error. A tool
// that was not offered to the turn is refused without reaching the host
// (its tool event and terminal report say so). Arguments absent or null are
// no arguments.
func (r *Relay) Tool(log logrus.FieldLogger, callID, name string, offered bool, rawArgs json.RawMessage) (text string, isError bool) {
	var args json.RawMessage
	if len(rawArgs) > 0 && string(rawArgs) != "null" {
		args = rawArgs
	}
	call := bus.ToolCall{V: bus.Version, CallID: callID, Name: name, Args: args}
	log = log.WithFields(logrus.Fields{"tool": name, "callId": callID})

	if !offered {
		e := teamster.Errorf(teamster.CodeInvalidRequest, "tool %.80q was not offered to this turn", name)
		errJSON, _ := json.Marshal(e)
		r.Emit(bus.EventTool, bus.ToolData{CallID: callID, Name: name, Args: args, Outcome: bus.OutcomeFailure, Error: errJSON})
		r.terminal(call, false, bus.OutcomeFailure, errJSON)
		return e.Message, true
	}
	reply, err := r.host.Tool(r.ctx, call)
	if err != nil {
		if r.ctx.Err() != nil {
			return "the turn was cancelled before the tool answered", true
		}
		r.Fail(r.errs.Host("tool", err))
		return "the host could not run the tool", true
	}
	if reply == nil {
		r.Fail(r.errs.Failed("the host's tool callback for %s returned no reply", callID))
		return "the host could not run the tool", true
	}
	ev := bus.ToolData{CallID: callID, Name: name, Args: args}
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
	log.WithField("outcome", ev.Outcome).Debug(string(r.errs) + "tool call")
	r.Emit(bus.EventTool, ev)
	r.terminal(call, true, ev.Outcome, ev.Error)
	return text, isError
}

// terminal reports a tool call's terminal outcome and keeps the host's
// canonical lastToolError.
func (r *Relay) terminal(call bus.ToolCall, started bool, outcome string, errJSON json.RawMessage) {
	term, err := r.host.ToolTerminal(r.ctx, bus.ToolTerminal{V: bus.Version, CallID: call.CallID, Name: call.Name,
		Args: call.Args, ExecutionStarted: started, Outcome: outcome, Error: errJSON})
	switch {
	case err != nil:
		if r.ctx.Err() == nil {
			r.Fail(r.errs.Host("toolTerminal", err))
		}
	case term == nil:
		r.Fail(r.errs.Failed("the host's toolTerminal callback for %s returned no reply", call.CallID))
	case term.Status != bus.StatusOK:
		r.Fail(r.errs.Failed("the host refused the terminal report of %s: %v", call.CallID, term.Error))
	default:
		r.mu.Lock()
		r.lastToolError = term.LastToolError
		r.mu.Unlock()
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

// OfferedTools are the attempt's tools the model may call: all of them, or
// those toolsAllow names ("*" allows all; an empty list none).
func OfferedTools(a *bus.Attempt) map[string]bool {
	out := map[string]bool{}
	for _, tool := range a.Tools {
		if Allows(a.ToolsAllow, tool.Name) {
			out[tool.Name] = true
		}
	}
	return out
}

// Allows reports whether toolsAllow (nil: no restriction) lets name run.
func Allows(allow *[]string, name string) bool {
	if allow == nil {
		return true
	}
	for _, n := range *allow {
		if n == name || strings.TrimSpace(n) == "*" {
			return true
		}
	}
	return false
}

// CleanupBudget is how long aborting a turn of a may take: most of the
// attempt's grace (settlementTimeoutMs), within [lo, hi].
func CleanupBudget(a *bus.Attempt, lo, hi time.Duration) time.Duration {
	d := a.SettlementTimeout() * 3 / 4
	return min(max(d, lo), hi)
}

// Wait waits up to d (none when negative) for wg, and reports whether it
// was done in time.
func Wait(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(max(d, 0)):
		return false
	}
}
