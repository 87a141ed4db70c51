package codex

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// Bounds of the protocol steps a turn waits for.
const (
	// callTimeout bounds one request that should answer at once
	// (thread/start, turn/start, turn/steer, thread/unsubscribe).
	callTimeout = 30 * time.Second
	// resumeRetry is how long a resume refused because another process
	// still holds the thread ("active writer") is retried: the previous
	// turn's worker releases it when that turn ends.
	resumeRetry = 10 * time.Second
	// closeWait bounds the wait for thread/closed after unsubscribing.
	closeWait = 5 * time.Second
	// maxCleanup bounds interrupting a cancelled turn; the attempt's
	// grace (settlementTimeoutMs) bounds it further.
	maxCleanup = 10 * time.Second
	minCleanup = 500 * time.Millisecond
)

// turn is one attempt on the app-server: open the thread, start the turn,
// relay its events until turn/completed, then let the thread go.
type turn struct {
	h   *codexHarness
	p   *process
	c   *conn
	run *harness.Run
	ctx context.Context
	log logrus.FieldLogger

	// hctx bounds the host callbacks of server requests; it ends with ctx
	// or when the turn is being aborted.
	hctx    context.Context
	hcancel context.CancelFunc

	threadID string
	turnID   string
	box      *mailbox

	out   *harness.Outcome
	usage usageMeter
	tools map[string]bool // names offered to the model this turn

	ended    atomic.Bool    // the turn is over: injection is refused
	handlers sync.WaitGroup // server requests in hand

	// rel is the turn's side of the Host contract: events, usage, tool
	// calls (their lastToolError) and the turn's first failure.
	rel     *nativecli.Relay
	lastErr string // the last non-retried error notification
}

type turnParams struct {
	h        *codexHarness
	p        *process
	run      *harness.Run
	ctx      context.Context
	threadID string
}

func newTurn(tp turnParams) *turn {
	a := tp.run.Attempt
	t := &turn{h: tp.h, p: tp.p, c: tp.p.conn, run: tp.run, ctx: tp.ctx, threadID: tp.threadID,
		out: &harness.Outcome{AssistantTexts: []string{}},
		log: tp.h.log.WithFields(logrus.Fields{"attempt": a.AttemptID, "worker": tp.run.WorkerID, "fence": tp.run.Fence, "pid": tp.p.pid})}
	t.hctx, t.hcancel = context.WithCancel(tp.ctx)
	t.rel = nativecli.NewRelay(tp.run.Host, t.hctx, errs)
	t.tools = nativecli.OfferedTools(a)
	return t
}

// drive runs the turn to its end. Whatever happens, the thread is let go
// (unsubscribed and unloaded) before it returns, so that the session's next
// turn can resume it on any worker.
func (t *turn) drive() (*harness.Outcome, error) {
	defer t.hcancel()
	defer t.release()
	if err := t.current(); err != nil {
		return nil, err
	}
	if err := t.open(); err != nil {
		return nil, err
	}
	// turn/start is the step the endpoint sees: a worker that woke from a
	// pause past its lease must not take it.
	if err := t.current(); err != nil {
		return nil, err
	}
	if err := t.start(); err != nil {
		return nil, err
	}
	t.installInjector()
	return t.loop()
}

// open starts a new thread, or resumes the session's.
func (t *turn) open() error {
	if t.threadID == "" {
		// A detached context: once the app-server has a thread, the turn
		// must learn its id to let it go again.
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		var res threadResult
		err := t.c.call(ctx, methodThreadStart, threadStartParams{
			Model: t.model(), Cwd: t.h.s.Cwd, DynamicTools: t.dynamicTools(), ExperimentalRawEvents: true,
		}, &res)
		if err != nil {
			return t.stepError(methodThreadStart, err)
		}
		if res.Thread.ID == "" {
			return errs.Failed("thread/start answered without a thread id")
		}
		t.threadID = res.Thread.ID
		t.box = t.c.subscribe(t.threadID)
		t.usage.fresh()
		t.log = t.log.WithField("thread", t.threadID)
		t.log.Debug("codex: thread started")
		return t.ctxErr()
	}
	t.log = t.log.WithField("thread", t.threadID)
	// Subscribe first: resuming replays the thread's token usage, the
	// baseline of this turn's usage.
	t.box = t.c.subscribe(t.threadID)
	if err := t.resume(); err != nil {
		return err
	}
	t.log.Debug("codex: thread resumed")
	return nil
}

// resume loads the session's thread, retrying while another process still
// holds it.
func (t *turn) resume() error {
	params := threadResumeParams{ThreadID: t.threadID, ExcludeTurns: true, Model: t.model(), Cwd: t.h.s.Cwd}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(resumeRetry))
	err := backoff.Retry(func() error {
		err := t.c.call(t.ctx, methodThreadResume, params, nil)
		var re *rpcError
		if errors.As(err, &re) && strings.Contains(re.Message, "active writer") {
			return err
		}
		if err != nil {
			return backoff.Permanent(err)
		}
		return nil
	}, backoff.WithContext(bo, t.ctx))
	if err == nil {
		return nil
	}
	var re *rpcError
	if errors.As(err, &re) {
		return errs.FailedNone("cannot resume the session's thread %s: %s", t.threadID, re.Message)
	}
	return t.stepError(methodThreadResume, err)
}

// start starts the turn with the attempt's prompt.
func (t *turn) start() error {
	// Detached, like thread/start: once a turn runs, only its id lets the
	// harness interrupt it.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var res turnResult
	err := t.c.call(ctx, methodTurnStart, turnStartParams{ThreadID: t.threadID, Input: textInput(t.run.Attempt.Prompt)}, &res)
	if err != nil {
		return t.stepError(methodTurnStart, err)
	}
	if res.Turn.ID == "" {
		return errs.Failed("turn/start answered without a turn id")
	}
	t.turnID = res.Turn.ID
	t.log = t.log.WithField("turn", t.turnID)
	t.log.Debug("codex: turn started")
	return nil
}

// stepError is the attempt's error when a protocol step failed: the context's
// when it is done, else harness_failed (with sideEffects none when the
// app-server refused the step, so nothing happened).
func (t *turn) stepError(method string, err error) error {
	if t.ctx.Err() != nil {
		return errs.Ctx(t.ctx)
	}
	var re *rpcError
	if errors.As(err, &re) {
		return errs.FailedNone("%s refused: %s", method, re.Message)
	}
	if isUnanswered(err) {
		return errs.Failed("%s: %v", method, err)
	}
	return errs.FailedNone("%s: %v", method, err)
}

// current is the run's lease check (harness.Run.Current) before an
// externally visible step: lease_lost when the run may no longer act.
func (t *turn) current() error {
	if err := t.ctxErr(); err != nil {
		return err
	}
	if t.run.Current != nil && !t.run.Current() {
		return teamster.Errorf(teamster.CodeLeaseLost, "codex: the run's lease is no longer current; not starting the turn").WithSideEffects(teamster.SideEffectsNone)
	}
	return nil
}

func (t *turn) ctxErr() error {
	if t.ctx.Err() != nil {
		return errs.Ctx(t.ctx)
	}
	return nil
}

// model is the thread's model: the settings', else the attempt's.
func (t *turn) model() string {
	if t.h.s.Model != "" {
		return t.h.s.Model
	}
	return t.run.Attempt.ModelID
}

// installInjector installs the run's injection handle as the manifest says:
// steering (turn/steer) for v2 and v1, nothing for none.
func (t *turn) installInjector() {
	t.newSteerer().Install(t.run, t.h.m)
}

// loop relays the turn's notifications until it completes, the attempt's
// context ends (interrupt), a host callback fails (interrupt) or the process
// dies.
func (t *turn) loop() (*harness.Outcome, error) {
	for {
		select {
		case <-t.box.signal:
			for _, m := range t.box.take() {
				if done, err := t.handle(m); done {
					return t.finish(err)
				}
			}
		case <-t.ctx.Done():
			return nil, t.abort(errs.Ctx(t.ctx))
		case <-t.rel.Failed():
			return nil, t.abort(t.rel.Failure())
		case <-t.p.Done():
			return nil, t.died()
		}
	}
}

// handle processes one message; done says the turn ended, with err its
// error (nil for a completed turn).
func (t *turn) handle(m *message) (done bool, err error) {
	if m.isRequest() {
		t.serve(m)
		return false, nil
	}
	switch m.Method {
	case noteAgentMessageDelta:
		var n agentMessageDelta
		if json.Unmarshal(m.Params, &n) == nil && n.TurnID == t.turnID && n.Delta != "" {
			t.rel.Emit(bus.EventPartial, bus.PartialData{Text: n.Delta, ItemID: n.ItemID})
		}
	case noteItemCompleted:
		var n itemCompletedNote
		if json.Unmarshal(m.Params, &n) == nil && n.TurnID == t.turnID {
			t.itemCompleted(n.Item)
		}
	case noteRawResponse:
		var n rawResponseNote
		if json.Unmarshal(m.Params, &n) == nil && n.TurnID == t.turnID {
			if id, tokens, ok := t.usage.raw(n); ok {
				t.rel.ReportUsage(id, tokens)
			}
		}
	case noteTokenUsage:
		var n tokenUsageNote
		if json.Unmarshal(m.Params, &n) == nil {
			if id, tokens, ok := t.usage.tokens(t.threadID, n, n.TurnID == t.turnID); ok {
				t.rel.ReportUsage(id, tokens)
			}
		}
	case noteError:
		var n errorNote
		if json.Unmarshal(m.Params, &n) == nil && n.TurnID == t.turnID && !n.WillRetry {
			t.lastErr = n.Error.Message
		}
	case noteThreadClosed:
		return true, errs.Failed("the app-server closed the thread during the turn")
	case noteTurnCompleted:
		var n turnCompletedNote
		if json.Unmarshal(m.Params, &n) != nil || n.Turn.ID != t.turnID {
			return false, nil
		}
		return true, t.completed(n.Turn)
	}
	return false, nil
}

// completed is the error of a turn that ended with status st (nil when it
// completed).
func (t *turn) completed(st turnInfo) error {
	switch st.Status {
	case turnCompleted:
		return nil
	case turnInterrupted:
		if t.ctx.Err() != nil {
			return errs.Ctx(t.ctx)
		}
		return errs.Failed("the app-server interrupted the turn")
	default:
		msg := t.lastErr
		if st.Error != nil && st.Error.Message != "" {
			msg = st.Error.Message
		}
		if msg == "" {
			msg = "no reason given"
		}
		return errs.Failed("the turn %s: %s", st.Status, msg)
	}
}

// itemCompleted adds a completed item to the outcome: assistant text,
// reasoning, plan.
func (t *turn) itemCompleted(it threadItem) {
	switch it.Type {
	case "agentMessage":
		t.out.AssistantTexts = append(t.out.AssistantTexts, it.Text)
	case "reasoning":
		text := strings.TrimSpace(strings.Join(append(append([]string{}, it.Summary...), it.Content...), "\n"))
		if text != "" {
			t.rel.Emit(bus.EventAgent, bus.AgentData{Kind: bus.AgentReasoning, Text: text})
			t.out.ReasoningText = appendText(t.out.ReasoningText, text)
		}
	case "plan":
		if it.Text != "" {
			t.rel.Emit(bus.EventAgent, bus.AgentData{Kind: bus.AgentPlan, Text: it.Text})
			t.out.PlanText = appendText(t.out.PlanText, it.Text)
		}
	}
}

func appendText(to, s string) string {
	if to == "" {
		return s
	}
	return to + "\n" + s
}

// finish ends a turn that completed (err nil) or failed at the app-server.
func (t *turn) finish(err error) (*harness.Outcome, error) {
	t.ended.Store(true)
	if err != nil {
		t.hcancel()
	}
	t.waitHandlers(t.cleanupBudget())
	if ferr := t.rel.Failure(); ferr != nil {
		return nil, ferr
	}
	if err != nil {
		return nil, err
	}
	t.out.LastToolError = t.rel.LastToolError()
	t.out.NativeSession = encodeBinding(t.threadID)
	t.log.WithField("texts", len(t.out.AssistantTexts)).Debug("codex: turn completed")
	return t.out, nil
}

// abort ends a turn that is still running: turn/interrupt, then wait (within
// the cleanup budget) for the app-server to confirm with turn/completed, so
// that the thread is idle before it is let go. It returns cause.
func (t *turn) abort(cause error) error {
	t.ended.Store(true)
	t.hcancel()
	budget := t.cleanupBudget()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	t.log.WithError(cause).Info("codex: interrupting the turn")
	if err := t.c.call(ctx, methodTurnInterrupt, turnInterruptParams{ThreadID: t.threadID, TurnID: t.turnID}, nil); err != nil {
		// "no active turn": it ended meanwhile, which is fine.
		t.log.WithError(err).Debug("codex: turn/interrupt")
	}
	t.drainUntil(ctx, func(m *message) bool {
		var n turnCompletedNote
		return m.Method == noteTurnCompleted && json.Unmarshal(m.Params, &n) == nil && n.Turn.ID == t.turnID
	})
	t.waitHandlers(budget)
	return cause
}

// died ends a turn whose process exited. The turn is not replayed anywhere.
func (t *turn) died() error {
	t.ended.Store(true)
	t.hcancel()
	return errs.Failed("the codex app-server (pid %d) exited during the turn (%s); the turn is not replayed", t.p.pid, t.p.exitReason())
}

// release lets the thread go: thread/unsubscribe, then wait for
// thread/closed, which says the app-server unloaded it and released its
// writer lock in CODEX_HOME.
func (t *turn) release() {
	if t.box == nil {
		return
	}
	defer func() {
		t.c.unsubscribe(t.threadID, t.box)
		t.box = nil
	}()
	select {
	case <-t.p.Done():
		return // a dead process holds nothing
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	var res unsubscribeResult
	if err := t.c.call(ctx, methodThreadUnsubscribe, threadIDParams{ThreadID: t.threadID}, &res); err != nil {
		t.log.WithError(err).Warn("codex: thread/unsubscribe failed; the thread may stay loaded in this app-server")
		return
	}
	if res.Status != "unsubscribed" {
		return // notLoaded, notSubscribed: nothing to wait for
	}
	if !t.drainUntil(ctx, func(m *message) bool { return m.Method == noteThreadClosed }) {
		t.log.Warn("codex: the thread did not close after thread/unsubscribe; another worker may not resume it until it does")
	}
}

// drainUntil reads the mailbox until stop accepts a message (true), ctx ends
// or the process dies (false). Server requests that arrive meanwhile are
// refused: the turn is over.
func (t *turn) drainUntil(ctx context.Context, stop func(*message) bool) bool {
	for {
		for _, m := range t.box.take() {
			if m.isRequest() {
				_ = t.c.respondError(m.ID, codeInvalidParams, "the teamster run of this turn has ended")
				continue
			}
			if stop(m) {
				return true
			}
		}
		select {
		case <-t.box.signal:
		case <-ctx.Done():
			return false
		case <-t.p.Done():
			return false
		}
	}
}

// cleanupBudget is how long aborting may take: most of the attempt's
// grace (settlementTimeoutMs) (after which the worker gives up on the harness), within
// [minCleanup, maxCleanup].
func (t *turn) cleanupBudget() time.Duration {
	return nativecli.CleanupBudget(t.run.Attempt, minCleanup, maxCleanup)
}

// waitHandlers waits up to d for the server requests in hand.
func (t *turn) waitHandlers(d time.Duration) {
	if !nativecli.Wait(&t.handlers, d) {
		t.log.Warn("codex: server requests still in hand after the turn ended")
	}
}

// dynamicTools are the offered tools as the app-server takes them.
func (t *turn) dynamicTools() []dynamicTool {
	var out []dynamicTool
	for _, tool := range t.run.Attempt.Tools {
		if !t.tools[tool.Name] {
			continue
		}
		schema := tool.InputSchema
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, dynamicTool{Type: "function", Name: tool.Name, Description: tool.Description, InputSchema: schema})
	}
	return out
}
