package scripted

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/injection"
	"github.com/teamster-fleet/teamster/selection"
)

// fingerprint is the runtime artifact fingerprint of this implementation. A
// run asked to capture its runtime artifact returns {id: <harness id>,
// fingerprint: "scripted/1"}.
const fingerprint = "scripted/1"

// Options configure a scripted harness.
type Options struct {
	// Ledger, when set, records the start and end of every run.
	Ledger Ledger
	// Workspace, when set, is the directory write steps write into and
	// the workspace the harness's runs report (harness.Workspacer): the
	// worker reads reply attachments from it.
	Workspace string
}

// Harness is the scripted harness. It is safe for concurrent use; each run
// keeps its own state.
type Harness struct {
	m    selection.Manifest
	opts Options
}

var (
	_ harness.Harness           = (*Harness)(nil)
	_ harness.Resetter          = (*Harness)(nil)
	_ harness.ArtifactValidator = (*Harness)(nil)
	_ harness.Finalizer         = (*Harness)(nil)
	_ harness.Workspacer        = (*Harness)(nil)
)

// New returns a scripted harness registered with manifest m.
func New(m selection.Manifest, o Options) *Harness {
	return &Harness{m: m, opts: o}
}

// Manifest returns the harness's manifest.
func (h *Harness) Manifest() selection.Manifest { return h.m }

// Workspace is the directory of Options.Workspace, for every run.
func (h *Harness) Workspace(*harness.Run) string { return h.opts.Workspace }

// Supports applies the standard route contract to the manifest
// (harness.SupportsManifest).
func (h *Harness) Supports(a *bus.Attempt) (bool, string) {
	return harness.SupportsManifest(h.m, a)
}

// Reset does nothing: the scripted harness's binding lives in the session
// record only.
func (h *Harness) Reset(ctx context.Context, sessionKey string, binding json.RawMessage) error {
	return nil
}

// ValidateRuntimeArtifact accepts exactly the artifact this harness captures:
// {id: <harness id>, fingerprint: "scripted/1"}; anything else is
// runtime_artifact_mismatch.
func (h *Harness) ValidateRuntimeArtifact(ctx context.Context, a bus.RuntimeArtifact) error {
	if a != h.artifact() {
		return teamster.Errorf(teamster.CodeRuntimeArtifactMismatch, "scripted: the expected runtime artifact is not this harness's")
	}
	return nil
}

func (h *Harness) artifact() bus.RuntimeArtifact {
	return bus.RuntimeArtifact{ID: h.m.ID, Fingerprint: fingerprint}
}

// RunAttempt plays the attempt's script, or echoes its prompt (see the
// package doc). Every error it returns is a *teamster.Error.
func (h *Harness) RunAttempt(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	if err := checkRun(run); err != nil {
		return nil, err
	}
	h.record(run, EventStart)
	q := newQueue()
	defer func() {
		q.end()
		h.record(run, EventEnd)
	}()
	// The preparation and the outcome are calls of their own, so that a
	// turn asleep in a step keeps a small stack (the worker's runtime
	// shrinks a sleeping goroutine's stack only when little of it is used).
	p, steps, err := h.prepare(ctx, run, q)
	if err != nil {
		return nil, err
	}
	for i := range steps {
		if err := p.mayAct(run, i); err != nil {
			return nil, err
		}
		h.recordStep(run, i)
		if err := p.play(&steps[i]); err != nil {
			return nil, err
		}
	}
	return h.outcome(run, p), nil
}

// FinalizeSettledTurn is the settled-turn finalization (harness.Finalizer),
// which the scripted harness enforces by having nothing to restrict: it
// plays no script, calls no host, installs no injection handle. On the
// session's thread (the binding) it answers one text, naming the thread
// and the turn it is, and the first line of the host's instruction:
// "finalized (thread <thread>, turn <n>): <first line>".
func (h *Harness) FinalizeSettledTurn(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	if err := checkRun(run); err != nil {
		return nil, err
	}
	h.record(run, EventStart)
	defer h.record(run, EventEnd)
	if err := ctx.Err(); err != nil {
		return nil, ctxError(ctx)
	}
	if run.Current != nil && !run.Current() {
		return nil, teamster.Errorf(teamster.CodeLeaseLost, "the run's lease is no longer held")
	}
	next := nextBinding(run.Binding, run.Attempt.SessionID)
	var b binding
	_ = jsonv1.Unmarshal(next, &b)
	first, _, _ := strings.Cut(strings.TrimSpace(run.Attempt.Prompt), "\n")
	text := fmt.Sprintf("finalized (thread %s, turn %d): %s", b.Thread, b.Turns, first)
	if err := run.Host.Emit(ctx, bus.EventPartial, bus.PartialData{Text: text}); err != nil {
		return nil, err
	}
	return &harness.Outcome{AssistantTexts: []string{text}, NativeSession: next}, nil
}

// checkRun refuses a run without an attempt or a host.
func checkRun(run *harness.Run) error {
	if run == nil || run.Attempt == nil {
		return failed("the run has no attempt")
	}
	if run.Host == nil {
		return failed("the run has no host")
	}
	return nil
}

// prepare checks the run's context and expected artifact, parses the
// prompt and offers the injection handle.
func (h *Harness) prepare(ctx context.Context, run *harness.Run, q *queue) (*player, []step, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, ctxError(ctx)
	}
	if want := run.Attempt.ExpectedRuntimeArtifact; want != nil {
		if err := h.ValidateRuntimeArtifact(ctx, *want); err != nil {
			return nil, nil, err
		}
	}
	steps, err := parsePrompt(run.Attempt.Prompt)
	if err != nil {
		return nil, nil, err
	}
	switch h.m.InjectionLevel() {
	case selection.InjectionV2:
		run.SetInjector(v2Handle{q: q})
	case selection.InjectionV1:
		run.SetInjector(v1Handle{q: q})
	}
	return &player{ctx: ctx, workspace: h.opts.Workspace, host: run.Host, q: q, out: &harness.Outcome{AssistantTexts: []string{}}}, steps, nil
}

// mayAct says whether step i may act: the run's context is live and its
// lease still held.
func (p *player) mayAct(run *harness.Run, i int) error {
	if p.ctx.Err() != nil {
		return ctxError(p.ctx)
	}
	if run.Current != nil && !run.Current() {
		// The lease is gone (a pause past the TTL, say): act no more.
		return teamster.Errorf(teamster.CodeLeaseLost, "the run's lease is no longer held; stopped before step %d", i)
	}
	return nil
}

// outcome completes the played run's outcome: the next native binding and,
// when asked for, the runtime artifact.
func (h *Harness) outcome(run *harness.Run, p *player) *harness.Outcome {
	p.out.NativeSession = nextBinding(run.Binding, run.Attempt.SessionID)
	if run.Attempt.CaptureRuntimeArtifact {
		a := h.artifact()
		p.out.RuntimeArtifact = &a
	}
	return p.out
}

// recordStep records that step i is about to act (EventStep), after the
// run's currency was checked.
func (h *Harness) recordStep(run *harness.Run, i int) {
	if h.opts.Ledger == nil {
		return
	}
	h.opts.Ledger.Record(Entry{Event: EventStep, Step: i, Session: run.Attempt.SessionKey, Attempt: run.Attempt.AttemptID,
		Worker: run.WorkerID, Fence: run.Fence, Delegate: run.Delegate, TimeNs: time.Now().UnixNano()})
}

// record writes one ledger entry, when the harness has a ledger.
func (h *Harness) record(run *harness.Run, event string) {
	if h.opts.Ledger == nil {
		return
	}
	h.opts.Ledger.Record(Entry{
		Event: event, Session: run.Attempt.SessionKey, Attempt: run.Attempt.AttemptID,
		Worker: run.WorkerID, Fence: run.Fence, Delegate: run.Delegate,
		TimeNs: time.Now().UnixNano(),
	})
}

// player plays the steps of one run.
type player struct {
	ctx       context.Context
	workspace string
	host      harness.Host
	q         *queue
	out       *harness.Outcome
	tools     int // tool steps played so far
	usage     int // usage steps played so far
}

// play runs one step. Each kind is a call of its own, so that a turn asleep
// in a step keeps a small stack.
func (p *player) play(s *step) error {
	switch s.kind {
	case stepSay:
		return p.say(s.text)
	case stepReason:
		return p.agent(bus.AgentReasoning, s.text, &p.out.ReasoningText)
	case stepPlan:
		return p.agent(bus.AgentPlan, s.text, &p.out.PlanText)
	case stepSleep:
		return p.sleep(time.Duration(s.n) * time.Millisecond)
	case stepTool:
		return p.tool(s.tool)
	case stepUsage:
		return p.reportUsage(s)
	case stepAwaitInjection:
		return p.awaitInjection(time.Duration(s.n) * time.Millisecond)
	case stepAsk:
		return p.ask(s.ask)
	case stepWrite:
		return p.write(s.file)
	case stepFail:
		return teamster.Errorf(teamster.CodeHarnessFailed, "%s", s.text)
	default:
		// parseStep admits only the steps above.
		return failed("unknown step %s", quote(s.kind))
	}
}

// say streams a piece of assistant text.
func (p *player) say(text string) error {
	if err := p.emit(bus.EventPartial, bus.PartialData{Text: text}); err != nil {
		return err
	}
	p.out.AssistantTexts = append(p.out.AssistantTexts, text)
	return nil
}

// agent streams a piece of reasoning or plan text and adds it to the
// outcome's.
func (p *player) agent(kind, text string, to *string) error {
	if err := p.emit(bus.EventAgent, bus.AgentData{Kind: kind, Text: text}); err != nil {
		return err
	}
	*to = appendText(*to, text)
	return nil
}

// reportUsage reports a usage step through the host.
func (p *player) reportUsage(s *step) error {
	p.usage++
	id := s.responseID
	if id == "" {
		id = fmt.Sprintf("resp-%d", p.usage)
	}
	if err := p.host.ReportUsage(p.ctx, id, s.n); err != nil {
		return p.hostError("usage", err)
	}
	return nil
}

// appendText adds a piece of reasoning or plan text, one piece a line.
func appendText(to, s string) string {
	if to == "" {
		return s
	}
	return to + "\n" + s
}

func (p *player) emit(eventType string, data any) error {
	if err := p.host.Emit(p.ctx, eventType, data); err != nil {
		return p.hostError("emit", err)
	}
	return nil
}

// sleep waits d, or until the context is done.
func (p *player) sleep(d time.Duration) error {
	// One channel to wait on, closed by the timer or by the context,
	// whichever comes first: a turn asleep here keeps a small stack.
	wake := make(chan struct{})
	var once sync.Once
	ring := func() { once.Do(func() { close(wake) }) }
	t := time.AfterFunc(d, ring)
	defer t.Stop()
	stop := context.AfterFunc(p.ctx, ring)
	defer stop()
	<-wake
	if p.ctx.Err() != nil {
		return ctxError(p.ctx)
	}
	return nil
}

// tool plays a tool step: the tool callback, a tool event, the result text,
// then the terminal report.
func (p *player) tool(t toolStep) error {
	p.tools++
	callID := fmt.Sprintf("call-%d", p.tools)
	reply, err := p.host.Tool(p.ctx, bus.ToolCall{V: bus.Version, CallID: callID, Name: t.name, Args: t.args})
	if err != nil {
		return p.hostError("tool", err)
	}
	if reply == nil {
		return failed("the host's tool callback for %s returned no reply", callID)
	}
	ev := bus.ToolData{CallID: callID, Name: t.name, Args: t.args}
	if reply.Status == bus.StatusOK {
		ev.Outcome = bus.OutcomeSuccess
		ev.Result = reply.Result
		if len(ev.Result) == 0 {
			ev.Result = json.RawMessage("null")
		}
	} else {
		ev.Outcome = bus.OutcomeFailure
		e := reply.Error
		if e == nil {
			e = teamster.Errorf(teamster.CodeHarnessFailed, "the host refused the tool call without an error")
		}
		b, err := json.Marshal(e)
		if err != nil {
			return failed("encoding the error of %s: %v", callID, err)
		}
		ev.Error = b
	}
	if err := p.emit(bus.EventTool, ev); err != nil {
		return err
	}
	if ev.Outcome == bus.OutcomeSuccess && !t.quiet {
		p.out.AssistantTexts = append(p.out.AssistantTexts, string(ev.Result))
	}
	term, err := p.host.ToolTerminal(p.ctx, bus.ToolTerminal{
		V: bus.Version, CallID: callID, Name: t.name, Args: t.args,
		ExecutionStarted: true, Outcome: ev.Outcome, Error: ev.Error,
	})
	if err != nil {
		return p.hostError("toolTerminal", err)
	}
	if term == nil {
		return failed("the host's toolTerminal callback for %s returned no reply", callID)
	}
	if term.Status != bus.StatusOK {
		return failed("the host refused the terminal report of %s: %v", callID, term.Error)
	}
	p.out.LastToolError = term.LastToolError
	return nil
}

// awaitInjection waits up to d for injected input, then takes every queued
// item: its text is appended to the assistant texts and it is settled
// committed. An item whose assertion has fallen since it was queued is
// settled rejected instead and never dispatched.
func (p *player) awaitInjection(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if items := p.q.take(); len(items) > 0 {
			p.commit(items)
			return nil
		}
		select {
		case <-p.q.notify:
		case <-t.C:
			p.commit(p.q.take())
			return nil
		case <-p.ctx.Done():
			return ctxError(p.ctx)
		}
	}
}

// write writes a file, or makes a symlink, in the workspace, confined to it
// (os.Root): a path that would leave it is harness_failed.
func (p *player) write(w writeStep) error {
	if p.workspace == "" {
		return failed("write %s: the harness has no workspace (its settings' workspace)", quote(w.path))
	}
	if err := os.MkdirAll(p.workspace, 0o755); err != nil {
		return failed("write %s: %v", quote(w.path), err)
	}
	root, err := os.OpenRoot(p.workspace)
	if err != nil {
		return failed("write %s: %v", quote(w.path), err)
	}
	defer root.Close()
	if dir := path.Dir(w.path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return failed("write %s: %v", quote(w.path), err)
		}
	}
	if w.symlink != "" {
		_ = root.Remove(w.path)
		err = root.Symlink(w.symlink, w.path)
	} else {
		err = root.WriteFile(w.path, w.data, 0o644)
	}
	if err != nil {
		return failed("write %s: %v", quote(w.path), err)
	}
	return nil
}

// ask asks the host a blocking question (the userInput callback) and
// appends the answer to the assistant texts; a refusal ends the attempt
// with the host's error.
func (p *player) ask(a askStep) error {
	reply, err := p.host.UserInput(p.ctx, bus.UserInput{V: bus.Version, Question: a.question, Choices: a.choices})
	if err != nil {
		return p.hostError("userInput", err)
	}
	if reply == nil {
		return failed("the host's userInput callback returned no reply")
	}
	if reply.Status != bus.StatusOK {
		if reply.Error != nil {
			return reply.Error
		}
		return failed("the host refused the question without an error")
	}
	p.out.AssistantTexts = append(p.out.AssistantTexts, reply.Answer)
	return nil
}

func (p *player) commit(items []*item) {
	for _, it := range items {
		if it.assert != nil && !it.assert() {
			it.settle(injection.Rejected)
			continue
		}
		p.out.AssistantTexts = append(p.out.AssistantTexts, it.text)
		for _, img := range it.opts.Images {
			p.out.AssistantTexts = append(p.out.AssistantTexts, describeImage(img))
		}
		it.settle(injection.Committed)
	}
}

// describeImage is how the reply shows an image injected with steering
// input: "[image <mimeType>, <n> bytes, sha256 <first 12 hex digits>]" of
// its base64 data (the form OpenClaw's ImageContent has: {type: "image",
// data, mimeType}), or "[image: unreadable]" when it has no such data.
func describeImage(raw json.RawMessage) string {
	var img struct {
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
	}
	if json.Unmarshal(raw, &img) != nil || img.Data == "" {
		return "[image: unreadable]"
	}
	b, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil {
		return "[image: unreadable]"
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("[image %s, %d bytes, sha256 %x]", img.MimeType, len(b), sum[:6])
}

// hostError is the attempt's error after a failed host callback: the
// context's error when it is done (the callback most likely failed because
// of it), else the host's *teamster.Error, else harness_failed.
func (p *player) hostError(call string, err error) error {
	if p.ctx.Err() != nil {
		return ctxError(p.ctx)
	}
	var te *teamster.Error
	if errors.As(err, &te) && te != nil {
		return te
	}
	return failed("host %s: %v", call, err)
}

// ctxError is the attempt's error once ctx is done: its cause when that is a
// *teamster.Error, else deadline_exceeded or cancelled.
func ctxError(ctx context.Context) error {
	var te *teamster.Error
	if errors.As(context.Cause(ctx), &te) && te != nil {
		return te
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return teamster.Errorf(teamster.CodeDeadlineExceeded, "scripted: the attempt's deadline passed")
	}
	return teamster.Errorf(teamster.CodeCancelled, "scripted: the attempt was cancelled")
}

// binding is the scripted harness's native session binding.
type binding struct {
	Thread string `json:"thread"`
	Turns  int64  `json:"turns"`
}

// nextBinding returns the binding after one more completed turn: the turns
// of prev (0 when prev is absent or not a scripted binding) plus one. It runs
// on every turn, the echo turns of benchmarks included, so it uses the faster
// codec the envelopes use.
func nextBinding(prev json.RawMessage, sessionID string) json.RawMessage {
	var b binding
	var turns int64
	if len(prev) > 0 && jsonv1.Unmarshal(prev, &b) == nil && b.Turns > 0 {
		turns = b.Turns
	}
	if turns < math.MaxInt64 {
		turns++
	}
	out, _ := jsonv1.Marshal(binding{Thread: "scripted-" + sessionID, Turns: turns})
	return out
}
