package claude

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
	"github.com/teamster-fleet/teamster/injection"
)

// Bounds of a turn's cleanup.
const (
	// maxCleanup bounds interrupting a cancelled turn; the attempt's grace
	// (settlementTimeoutMs) bounds it further.
	maxCleanup = 10 * time.Second
	minCleanup = 500 * time.Millisecond
)

// turn is one attempt: one claude process, from its prompt to its exit.
type turn struct {
	h   *claudeHarness
	run *harness.Run
	ctx context.Context
	log logrus.FieldLogger

	// hctx bounds the host callbacks; it ends with ctx or when the turn is
	// being aborted.
	hctx    context.Context
	hcancel context.CancelFunc

	creds     credentials
	sessionID string
	resume    bool
	p         *process
	mcp       *mcpServer
	tools     map[string]bool // gateway tools offered to the model this turn

	out    *harness.Outcome
	meter  usageMeter
	inited bool // the CLI printed its init line

	// requested says a model request may have been made: the CLI said it
	// was requesting, or a response streamed. toolRan says a tool (the
	// gateway's or a built-in one) may have run. Either makes a failure's
	// side effects possible.
	requested atomic.Bool
	toolRan   atomic.Bool
	// ended is set (under the process's write lock) once the turn takes no
	// more input.
	ended atomic.Bool
	// final: the turn is a settled-turn finalization (one model turn, no
	// steering; its tools are withheld by the attempt).
	final bool

	// rel is the turn's side of the Host contract: events, usage, tool
	// calls (their lastToolError) and the turn's first failure.
	rel      *nativecli.Relay
	handlers sync.WaitGroup // tool calls in hand

	mu   sync.Mutex // guards cmds
	cmds map[string]*command
}

// command is a user line the harness wrote: the prompt or a steer.
type command struct {
	state   string             // the last command_lifecycle state seen, "" before any
	settler *injection.Settler // nil for the prompt
}

func newTurn(h *claudeHarness, run *harness.Run, ctx context.Context, sessionID string, creds credentials) *turn {
	a := run.Attempt
	t := &turn{h: h, run: run, ctx: ctx, creds: creds, sessionID: sessionID, resume: sessionID != "",
		out: &harness.Outcome{AssistantTexts: []string{}}, cmds: map[string]*command{},
		log: h.log.WithFields(logrus.Fields{"attempt": a.AttemptID, "worker": run.WorkerID, "fence": run.Fence, "keyEnv": creds.keyEnv})}
	t.hctx, t.hcancel = context.WithCancel(ctx)
	t.rel = nativecli.NewRelay(run.Host, t.hctx, errs)
	if t.sessionID == "" {
		t.sessionID = newUUID()
	}
	t.log = t.log.WithField("claudeSession", t.sessionID) // "session" is the hashed session key, in the worker's logs
	t.tools = nativecli.OfferedTools(a)
	return t
}

// drive runs the turn to its end.
func (t *turn) drive() (*harness.Outcome, error) {
	defer t.hcancel()
	if err := t.current(); err != nil {
		return nil, err
	}
	if len(t.tools) > 0 {
		m, err := startMCP(t)
		if err != nil {
			return nil, errs.FailedNone("start the gateway's MCP server: %v", err)
		}
		t.mcp = m
		defer m.close()
	}
	args, cleanup, err := t.args()
	if err != nil {
		return nil, errs.FailedNone("%v", err)
	}
	defer cleanup()
	p, err := startProcess(t.h.s.Binary, args, t.h.s.environ(t.h.home, t.creds), t.h.cwd, t.log)
	if err != nil {
		return nil, errs.FailedNone("%v", err)
	}
	t.p = p
	t.log = p.log
	defer t.reap()
	t.h.hmu.Lock()
	started := t.h.started
	t.h.hmu.Unlock()
	if started != nil {
		started(t.run.Attempt.AttemptID, p.pid)
	}
	// The prompt is the step the model sees: a worker that woke from a
	// pause past its lease must not take it.
	if err := t.current(); err != nil {
		p.kill()
		return nil, err
	}
	uuid := newUUID()
	t.mu.Lock()
	t.cmds[uuid] = &command{}
	t.mu.Unlock()
	if err := p.write(newUserLine(uuid, t.run.Attempt.Prompt, ""), nil); err != nil {
		p.kill()
		return nil, errs.FailedNone("write the prompt: %v", err)
	}
	t.log.WithField("resume", t.resume).Debug("claude: turn started")
	if !t.final {
		t.installInjector()
	}
	return t.loop()
}

// args is the CLI's command line for this turn; cleanup removes the files it
// names.
func (t *turn) args() ([]string, func(), error) {
	s := &t.h.s
	args := append([]string(nil), baseArgs...)
	args = append(args, "--model", t.model(), "--permission-mode", s.PermissionMode)
	builtins := allowedBuiltins(s.BuiltinTools, t.run.Attempt.ToolsAllow)
	args = append(args, "--tools", strings.Join(builtins, ","))
	allowed := append([]string(nil), builtins...)
	cleanup := func() {}
	args = append(args, "--strict-mcp-config")
	if t.mcp != nil {
		allowed = append(allowed, t.mcp.allowedNames()...)
		f, err := os.CreateTemp(t.h.home, ".teamster-mcp-*.json")
		if err != nil {
			return nil, nil, fmt.Errorf("write the MCP config: %w", err)
		}
		_, werr := f.Write(t.mcp.config())
		cerr := f.Close()
		if werr != nil || cerr != nil {
			os.Remove(f.Name())
			return nil, nil, fmt.Errorf("write the MCP config: %v %v", werr, cerr)
		}
		cleanup = func() { os.Remove(f.Name()) }
		args = append(args, "--mcp-config", f.Name())
	}
	if len(allowed) > 0 {
		args = append(args, "--allowedTools", strings.Join(allowed, ","))
	}
	switch {
	case t.final:
		args = append(args, "--max-turns", "1")
	case s.MaxTurns > 0:
		args = append(args, "--max-turns", strconv.Itoa(s.MaxTurns))
	}
	if t.resume {
		args = append(args, "--resume", t.sessionID)
	} else {
		args = append(args, "--session-id", t.sessionID)
	}
	return args, cleanup, nil
}

// model is the turn's model: the settings', else the attempt's.
func (t *turn) model() string {
	if t.h.s.Model != "" {
		return t.h.s.Model
	}
	return t.run.Attempt.ModelID
}

// current is the run's lease check (harness.Run.Current) before an
// externally visible step: lease_lost when the run may no longer act.
func (t *turn) current() error {
	if t.ctx.Err() != nil {
		return errs.Ctx(t.ctx)
	}
	if t.run.Current != nil && !t.run.Current() {
		return teamster.Errorf(teamster.CodeLeaseLost, "claude: the run's lease is no longer current; not starting the turn").WithSideEffects(teamster.SideEffectsNone)
	}
	return nil
}

// installInjector installs the run's injection handle as the manifest says.
func (t *turn) installInjector() {
	t.newSteerer().Install(t.run, t.h.m)
}

// loop relays the CLI's lines until the turn is over, the attempt's context
// ends (interrupt), a host callback fails (interrupt) or the process dies.
func (t *turn) loop() (*harness.Outcome, error) {
	for {
		select {
		case line, ok := <-t.p.lines:
			if !ok {
				return nil, t.died()
			}
			if done, err := t.handle(line); done {
				return t.finish(err)
			}
		case <-t.ctx.Done():
			return nil, t.abort(errs.Ctx(t.ctx))
		case <-t.rel.Failed():
			return nil, t.abort(t.rel.Failure())
		}
	}
}

// handle processes one stdout line; done says the turn is over, with err
// its error (nil for a completed turn).
func (t *turn) handle(raw []byte) (done bool, err error) {
	var l outLine
	if json.Unmarshal(raw, &l) != nil {
		t.log.WithField("bytes", len(raw)).Debug("claude: a stdout line is not JSON")
		return false, nil
	}
	switch l.Type {
	case lineSystem:
		switch l.Subtype {
		case "init":
			t.inited = true
			if l.SessionID != "" && l.SessionID != t.sessionID {
				t.log.WithField("reported", l.SessionID).Info("claude: the CLI runs the turn under another session id; binding that one")
				t.sessionID = l.SessionID
			}
		case "status":
			if l.Status == "requesting" {
				t.requested.Store(true)
			}
		}
	case lineStreamEvent:
		if l.Event != nil && l.topLevel() {
			t.streamEvent(l.Event)
		}
	case lineAssistant:
		t.assistant(&l)
	case lineCommandLifecycle:
		t.lifecycle(l.CommandUUID, l.State)
	case lineControlRequest:
		// The CLI asks its host something (a permission, a hook): nobody is
		// there; with --permission-prompts none it should not ask.
		_ = t.p.write(controlErrorResponse{Type: lineControlResponse, Response: controlErrorInner{
			Subtype: "error", RequestID: l.RequestID, Error: "the teamster worker answers no control requests"}}, nil)
		t.log.WithField("request", string(l.Request)).Debug("claude: refused a control request")
	case lineResult:
		return t.result(&l)
	}
	return false, nil
}

// streamEvent relays one API stream event: text deltas as partial events,
// and each completed response's usage.
func (t *turn) streamEvent(e *streamEvent) {
	t.requested.Store(true)
	switch e.Type {
	case "message_start":
		if e.Message != nil {
			t.meter.start(e.Message.ID, e.Message.Usage)
		}
	case "content_block_delta":
		if e.Delta != nil && e.Delta.Type == "text_delta" && e.Delta.Text != "" {
			t.rel.Emit(bus.EventPartial, bus.PartialData{Text: e.Delta.Text, ItemID: t.meter.id})
		}
	case "message_delta":
		t.meter.delta(e.Usage)
	case "message_stop":
		if id, tokens, ok := t.meter.stop(); ok {
			t.rel.ReportUsage(id, tokens)
		}
	}
}

// assistant adds a completed content block to the outcome: text, thinking
// (an agent event), or a tool use (a tool may run).
func (t *turn) assistant(l *outLine) {
	if !l.topLevel() {
		t.toolRan.Store(true) // a subagent is a tool at work
		return
	}
	for _, b := range l.Message.blocks() {
		switch b.Type {
		case "text":
			if b.Text != "" {
				t.out.AssistantTexts = append(t.out.AssistantTexts, b.Text)
			}
		case "thinking":
			if text := strings.TrimSpace(b.Thinking); text != "" {
				t.rel.Emit(bus.EventAgent, bus.AgentData{Kind: bus.AgentReasoning, Text: text})
				t.out.ReasoningText = appendText(t.out.ReasoningText, text)
			}
		case "tool_use":
			t.toolRan.Store(true)
		}
	}
}

func appendText(to, s string) string {
	if to == "" {
		return s
	}
	return to + "\n" + s
}

// lifecycle records a written line's progress; a steer the CLI took into the
// conversation is committed, one it dropped cancelled.
func (t *turn) lifecycle(uuid, state string) {
	t.mu.Lock()
	c := t.cmds[uuid]
	if c != nil && state != "" && c.state != cmdStarted && c.state != cmdCompleted {
		c.state = state
	}
	t.mu.Unlock()
	if c == nil || c.settler == nil {
		return
	}
	switch state {
	case cmdStarted, cmdCompleted:
		if c.settler.Settle(injection.Committed) {
			t.log.WithField("command", uuid).Debug("claude: steer committed")
		}
	case cmdCancelled:
		c.settler.Settle(injection.Cancelled)
	}
}

// result reads a result line: the end of one pass of the CLI over its
// input. The turn is over once every line written has been taken in and
// nothing is queued; otherwise the CLI goes on with what is queued.
func (t *turn) result(l *outLine) (bool, error) {
	if l.IsError {
		return true, t.resultError(l)
	}
	if l.QueuedTurnCount > 0 {
		return false, nil
	}
	closed := t.p.closeIf(func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, c := range t.cmds {
			if c.state == "" || c.state == cmdQueued {
				return false
			}
		}
		t.ended.Store(true)
		return true
	})
	return closed, nil
}

// resultError is the error of a result line that says the pass failed.
func (t *turn) resultError(l *outLine) error {
	if t.ctx.Err() != nil {
		return errs.Ctx(t.ctx)
	}
	why := strings.Join(l.Errors, "; ")
	if why == "" {
		why = l.Result
	}
	if why == "" {
		why = "no reason given"
	}
	if len(why) > 500 {
		why = why[:500] + "…"
	}
	if !t.inited && t.resume {
		return errs.FailedNone("cannot resume the session %s (%s): its transcript is not under this worker's home; the turn did not start", t.sessionID, why)
	}
	return t.failure0("the turn ended with %s (%s): %s", l.Subtype, l.TerminalReason, why)
}

// failure0 is harness_failed with the side effects the turn may have had.
func (t *turn) failure0(format string, args ...any) *teamster.Error {
	if t.requested.Load() || t.toolRan.Load() {
		return errs.Failed(format, args...)
	}
	return errs.FailedNone(format, args...)
}

// finish ends a turn that completed (err nil) or failed at the CLI: the CLI
// exits (its stdin is closed, or it is killed for a failure).
func (t *turn) finish(err error) (*harness.Outcome, error) {
	t.stopInput()
	if err != nil {
		t.hcancel()
		t.p.kill()
	}
	t.waitExit(exitGrace)
	t.waitHandlers(t.cleanupBudget())
	if ferr := t.rel.Failure(); ferr != nil {
		return nil, ferr
	}
	if err != nil {
		return nil, err
	}
	t.out.LastToolError = t.rel.LastToolError()
	t.out.NativeSession = encodeBinding(t.sessionID)
	t.log.WithField("texts", len(t.out.AssistantTexts)).Debug("claude: turn completed")
	return t.out, nil
}

// abort ends a turn that is still running: the interrupt control request,
// then (within the cleanup budget) the CLI's result for it and its exit;
// whatever still runs at the budget's end is killed. It returns cause.
func (t *turn) abort(cause error) error {
	t.stopInput()
	t.hcancel()
	budget := t.cleanupBudget()
	deadline := time.Now().Add(budget)
	t.log.WithError(cause).Info("claude: interrupting the turn")
	if err := t.p.write(controlRequest{Type: lineControlRequest, RequestID: "teamster-interrupt-" + randomToken(4),
		Request: map[string]any{"subtype": "interrupt"}}, nil); err != nil {
		t.log.WithError(err).Debug("claude: interrupt not written")
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
wait:
	for {
		select {
		case line, ok := <-t.p.lines:
			if !ok {
				break wait
			}
			var l outLine
			if json.Unmarshal(line, &l) != nil {
				continue
			}
			if l.Type == lineCommandLifecycle {
				t.lifecycle(l.CommandUUID, l.State)
			}
			if l.Type == lineResult {
				t.p.closeInput()
			}
		case <-timer.C:
			t.log.Warn("claude: the CLI did not stop within the grace; killing it")
			t.p.kill()
			break wait
		}
	}
	t.waitExit(time.Until(deadline) + time.Second)
	t.waitHandlers(time.Until(deadline) + time.Second)
	return cause
}

// died ends a turn whose process exited before the turn was over. The turn
// is not replayed anywhere.
func (t *turn) died() error {
	t.stopInput()
	t.hcancel()
	<-t.p.done
	if t.ctx.Err() != nil {
		return errs.Ctx(t.ctx)
	}
	if ferr := t.rel.Failure(); ferr != nil {
		return ferr
	}
	return t.failure0("the claude process (pid %d) exited during the turn (%s); the turn is not replayed", t.p.pid, t.p.exitReason())
}

// stopInput makes the turn take no more injected input.
func (t *turn) stopInput() {
	t.p.closeIf(func() bool { t.ended.Store(true); return false })
}

// waitExit waits up to d for the process to exit, handling the lines it
// still prints (lifecycle), then kills it.
func (t *turn) waitExit(d time.Duration) {
	timer := time.NewTimer(max(d, 0))
	defer timer.Stop()
	for {
		select {
		case line, ok := <-t.p.lines:
			if !ok {
				<-t.p.done
				return
			}
			var l outLine
			if json.Unmarshal(line, &l) == nil && l.Type == lineCommandLifecycle {
				t.lifecycle(l.CommandUUID, l.State)
			}
		case <-timer.C:
			t.p.kill()
			return
		}
	}
}

// reap makes sure the process is gone and settles the steers still open:
// written, fate unknown (unconfirmed).
func (t *turn) reap() {
	t.p.kill()
	go func() {
		for range t.p.lines {
		}
	}()
	t.mu.Lock()
	var open []*injection.Settler
	for _, c := range t.cmds {
		if c.settler != nil {
			open = append(open, c.settler)
		}
	}
	t.mu.Unlock()
	for _, s := range open {
		s.Settle(injection.Unconfirmed)
	}
}

// cleanupBudget is how long aborting may take: most of the attempt's grace
// (settlementTimeoutMs), within [minCleanup, maxCleanup].
func (t *turn) cleanupBudget() time.Duration {
	return nativecli.CleanupBudget(t.run.Attempt, minCleanup, maxCleanup)
}

// waitHandlers waits up to d for the tool calls in hand.
func (t *turn) waitHandlers(d time.Duration) {
	if !nativecli.Wait(&t.handlers, d) {
		t.log.Warn("claude: tool calls still in hand after the turn ended")
	}
}
