// Package harness is the Go form of OpenClaw's AgentHarness: the low-level
// executor of one prepared attempt. A harness declares its manifest, says
// whether it supports a prepared route, and runs an attempt with a host handle
// for events and host callbacks. Capabilities only some harnesses have are
// optional interfaces the worker checks for (Resetter, ArtifactValidator)
// and, for active-run injection, the handle a run installs with
// Run.SetInjector.
package harness

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

// Harness runs prepared attempts. Implementations are safe for concurrent use:
// a worker runs several attempts (of different sessions) at once.
type Harness interface {
	// Manifest is the harness's static registration.
	Manifest() selection.Manifest
	// Supports reports whether the harness can run the attempt's prepared
	// routes, and why not. Workers call it again under the lease.
	Supports(a *bus.Attempt) (bool, string)
	// RunAttempt runs one attempt until it ends or ctx is done. A cancelled
	// ctx must make it return promptly (within the attempt's grace,
	// settlementTimeoutMs). An error that is a *teamster.Error keeps its code; any other
	// error is reported as harness_failed.
	RunAttempt(ctx context.Context, run *Run) (*Outcome, error)
}

// Finalizer is a harness that can run OpenClaw's settled-turn finalization
// (an attempt with operation settled-tool-finalization): after a turn whose
// tool calls all settled without a visible answer, one follow-up on the
// session's native thread (run.Binding) with the host's instruction as its
// prompt, that exposes no tools, asks no questions, takes no injected input
// and runs no hooks, and returns one assistant answer (and the binding
// after it). Only a harness that can enforce all of that implements it: the
// worker refuses the operation, harness_unsupported_route, to any other.
// The run's Host refuses tool and question callbacks whatever the harness
// does.
type Finalizer interface {
	FinalizeSettledTurn(ctx context.Context, run *Run) (*Outcome, error)
}

// Workspacer is a harness whose runs work in a directory of the worker's
// (Codex's cwd, say). For an attempt with stageReplyMedia the worker lets
// the attempt's host read the files the reply names from it, confined to
// it, once the harness returned ok. "" means the run has none.
type Workspacer interface {
	Workspace(run *Run) string
}

// Host is what a running attempt reaches the gateway through: events on the
// attempt's reply subject, and the host callbacks of docs/PROTOCOL.md.
type Host interface {
	// Emit sends an event (partial, agent, tool) to the submitter; data is
	// encoded as JSON.
	Emit(ctx context.Context, eventType string, data any) error
	// Tool invokes a host tool with the arguments that reached it.
	Tool(ctx context.Context, call bus.ToolCall) (*bus.ToolReply, error)
	// ToolTerminal reports one terminal outcome of a tool call; the reply
	// carries the host's canonical settlement (lastToolError).
	ToolTerminal(ctx context.Context, t bus.ToolTerminal) (*bus.ToolTerminalReply, error)
	// UserInput asks the gateway a blocking question.
	UserInput(ctx context.Context, q bus.UserInput) (*bus.UserInputReply, error)
	// ReportUsage reports the output tokens of one completed model response.
	// The host de-duplicates per response id and emits cumulative usage
	// events; non-positive counts emit nothing.
	ReportUsage(ctx context.Context, responseID string, outputTokens int64) error
}

// Run is one attempt as a harness sees it.
type Run struct {
	Attempt *bus.Attempt
	Host    Host
	// WorkerID and Fence identify the lease the run holds.
	WorkerID string
	Fence    string
	// Delegate is the plugin id of the delegate that submitted the attempt,
	// "" for the session's owner.
	Delegate string
	// Binding is the session's stored native binding (nil for a fresh
	// session).
	Binding json.RawMessage
	// Current reports, at the moment of the call, whether the run may still
	// act: its context is live and its lease held (nil means always). A
	// harness checks it before each externally visible step, so that a
	// worker that wakes from a pause longer than its lease acts no more.
	Current func() bool

	mu       sync.Mutex
	injector any
	onActive func(any)
}

// SetInjector installs the run's active-run injection handle (an
// injection.V1 or injection.V2), as OpenClaw's setActiveEmbeddedRun does.
// Injections reach the run only after this call.
func (r *Run) SetInjector(h any) {
	r.mu.Lock()
	r.injector = h
	f := r.onActive
	r.mu.Unlock()
	if f != nil {
		f(h)
	}
}

// Injector returns the installed injection handle, nil when none.
func (r *Run) Injector() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.injector
}

// OnInjector registers f to be called when the harness installs its handle.
// The worker uses it; harnesses do not.
func (r *Run) OnInjector(f func(any)) {
	r.mu.Lock()
	r.onActive = f
	h := r.injector
	r.mu.Unlock()
	if h != nil && f != nil {
		f(h)
	}
}

// Outcome is what a completed attempt produced.
type Outcome struct {
	// AssistantTexts are the visible assistant replies, in order.
	AssistantTexts []string
	// ReasoningText and PlanText are what the turn produced besides visible
	// text; they decide the terminal classification of a turn without
	// visible text.
	ReasoningText string
	PlanText      string
	// LastToolError is the host's canonical settlement of the last failed
	// tool call, as returned by ToolTerminal.
	LastToolError json.RawMessage
	// NativeSession is the harness's native binding (thread id, resume
	// token), written to the session record when the turn commits.
	NativeSession json.RawMessage
	// RuntimeArtifact identifies the exact native runtime, when the attempt
	// asked for it (captureRuntimeArtifact).
	RuntimeArtifact *bus.RuntimeArtifact
}

// Resetter is a harness that keeps a native binding outside the session
// record and must clear it when the session is reset or deleted.
type Resetter interface {
	Reset(ctx context.Context, sessionKey string, binding json.RawMessage) error
}

// ArtifactValidator is a harness that can re-check a runtime artifact
// binding it returned before.
type ArtifactValidator interface {
	ValidateRuntimeArtifact(ctx context.Context, a bus.RuntimeArtifact) error
}

// SupportsManifest is the standard Supports: the route contract of OpenClaw
// applied to the harness's manifest (selection.Supports).
func SupportsManifest(m selection.Manifest, a *bus.Attempt) (bool, string) {
	return selection.Supports(m, a.SelectionRoutes())
}
