package bus

import (
	"encoding/json"
	"strings"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/selection"
)

// Authority kinds of an injection.
const (
	AuthorityRun         = "run"
	AuthoritySourceBound = "source-bound"
)

// Bounds of request fields.
const (
	// MaxGeneration is the largest source generation: 2^53-1, the largest
	// integer a JSON number carries exactly in every language (and Redis's
	// Lua).
	MaxGeneration = 1<<53 - 1
	MaxDebounceMs = 60_000
	maxTextLen    = MaxBody
)

// InjectRequest steers a running turn: on teamster.inject (addressed by
// sessionKey or attemptId) or teamster.run.<attemptId>.inject.
type InjectRequest struct {
	V             int        `json:"v"`
	SessionKey    string     `json:"sessionKey,omitempty"`
	AttemptID     string     `json:"attemptId,omitempty"`
	Text          string     `json:"text"`
	AuthorityKind string     `json:"authorityKind"`
	Source        *SourceRef `json:"source,omitempty"`
	// HostAssertion names the submitter's own assertion of a source-bound
	// item: the worker asks the attempt's host whether it still holds
	// (HostCallAssertCurrent) immediately before the harness dispatches the
	// item and before every retry.
	HostAssertion string            `json:"hostAssertion,omitempty"`
	Images        []json.RawMessage `json:"images,omitempty"`
	DebounceMs    int64             `json:"debounceMs,omitempty"`
}

// SourceRef names a source authority and the generation the request carries.
type SourceRef struct {
	ID         string `json:"id"`
	Generation int64  `json:"generation"`
}

// Validate checks an inject request. Addressing (sessionKey or attemptId) is
// checked by the receiver, because the run subject carries the attempt itself.
func (r *InjectRequest) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := optionalString("sessionKey", r.SessionKey, maxKeyLen); err != nil {
		return err
	}
	if err := optionalID("attemptId", r.AttemptID); err != nil {
		return err
	}
	if r.Text == "" {
		return invalid("field text is required")
	}
	switch r.AuthorityKind {
	case AuthorityRun:
		if r.Source != nil || r.HostAssertion != "" {
			return invalid("fields source and hostAssertion are only for source-bound input")
		}
	case AuthoritySourceBound:
		if r.Source == nil && r.HostAssertion == "" {
			return invalid("source-bound input carries field source, hostAssertion, or both")
		}
		if r.Source != nil {
			if err := CheckID("source.id", r.Source.ID); err != nil {
				return err
			}
			if err := checkRange("source.generation", r.Source.Generation, 1, MaxGeneration); err != nil {
				return err
			}
		}
		if err := optionalID("hostAssertion", r.HostAssertion); err != nil {
			return err
		}
	case "":
		return invalid("field authorityKind is required")
	default:
		return invalid("field authorityKind %q is not run or source-bound", truncate(r.AuthorityKind, 40))
	}
	for _, img := range r.Images {
		if len(img) == 0 || img[0] != '{' {
			return invalid("field images: each image is an object")
		}
	}
	return checkRange("debounceMs", r.DebounceMs, 0, MaxDebounceMs)
}

// InjectReply answers an inject request.
type InjectReply struct {
	V           int             `json:"v"`
	Status      string          `json:"status"`
	InjectionID string          `json:"injectionId,omitempty"`
	AttemptID   string          `json:"attemptId,omitempty"`
	Error       *teamster.Error `json:"error,omitempty"`
}

// Validate checks an inject reply.
func (r *InjectReply) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := checkReplyStatus(r.Status, r.Error, StatusAccepted, StatusRejected); err != nil {
		return err
	}
	if r.Status == StatusAccepted {
		// An accepted injection names its item and the run that took it.
		if err := requireString("injectionId", r.InjectionID, maxNameLen); err != nil {
			return err
		}
		return CheckID("attemptId", r.AttemptID)
	}
	if err := optionalString("injectionId", r.InjectionID, maxNameLen); err != nil {
		return err
	}
	return optionalID("attemptId", r.AttemptID)
}

// SourceGrant grants (or raises) a source authority's generation.
type SourceGrant struct {
	V          int    `json:"v"`
	ID         string `json:"id"`
	Generation int64  `json:"generation"`
}

// Validate checks a source grant.
func (g *SourceGrant) Validate() error {
	if err := checkVersion(g.V); err != nil {
		return err
	}
	if err := CheckID("id", g.ID); err != nil {
		return err
	}
	if err := checkRange("generation", g.Generation, 1, MaxGeneration); err != nil {
		return err
	}
	return nil
}

// SourceRevoke revokes a source authority, permanently for every generation up
// to the current one.
type SourceRevoke struct {
	V  int    `json:"v"`
	ID string `json:"id"`
}

// Validate checks a source revoke.
func (r *SourceRevoke) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	return CheckID("id", r.ID)
}

// SourceRevoked is the routers' broadcast of a revoke on
// teamster.source.revoked, heard by every worker: the source id and the
// tenant whose namespace it is in.
type SourceRevoked struct {
	V      int    `json:"v"`
	Tenant string `json:"tenant,omitempty"`
	ID     string `json:"id"`
}

// Validate checks a revoke broadcast.
func (r *SourceRevoked) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := optionalID("tenant", r.Tenant); err != nil {
		return err
	}
	return CheckID("id", r.ID)
}

// Scoped is the revoked source's id in its tenant's namespace.
func (r *SourceRevoked) Scoped() string { return teamster.Scope(r.Tenant, r.ID) }

// CancelRequest cancels a running attempt on teamster.run.<attemptId>.cancel.
type CancelRequest struct {
	V      int    `json:"v"`
	Reason string `json:"reason,omitempty"`
}

// Validate checks a cancel request.
func (c *CancelRequest) Validate() error {
	if err := checkVersion(c.V); err != nil {
		return err
	}
	return optionalString("reason", c.Reason, maxNameLen)
}

// SessionOp is the body of teamster.session.<op>.
type SessionOp struct {
	V          int    `json:"v"`
	SessionKey string `json:"sessionKey"`
	SessionID  string `json:"sessionId,omitempty"`
	StorePath  string `json:"storePath,omitempty"`
	AgentID    string `json:"agentId,omitempty"`
	// AgentHarnessID pins the session's harness (create, patch).
	AgentHarnessID string `json:"agentHarnessId,omitempty"`
	// ModelSelectionLocked sets the record's lock (create, patch).
	ModelSelectionLocked *bool `json:"modelSelectionLocked,omitempty"`
}

// Validate checks a session op body.
func (s *SessionOp) Validate() error {
	if err := checkVersion(s.V); err != nil {
		return err
	}
	if err := requireString("sessionKey", s.SessionKey, maxKeyLen); err != nil {
		return err
	}
	if err := optionalString("sessionId", s.SessionID, maxNameLen); err != nil {
		return err
	}
	if err := optionalString("storePath", s.StorePath, maxKeyLen); err != nil {
		return err
	}
	if err := optionalString("agentId", s.AgentID, maxNameLen); err != nil {
		return err
	}
	return optionalID("agentHarnessId", s.AgentHarnessID)
}

// ToolCall is the body of the host's tool callback.
type ToolCall struct {
	V      int             `json:"v"`
	CallID string          `json:"callId"`
	Name   string          `json:"name"`
	Args   json.RawMessage `json:"args,omitempty"`
}

// Validate checks a tool call.
func (t *ToolCall) Validate() error {
	if err := checkVersion(t.V); err != nil {
		return err
	}
	if err := requireString("callId", t.CallID, maxNameLen); err != nil {
		return err
	}
	return requireString("name", t.Name, maxNameLen)
}

// ToolReply answers a tool call.
type ToolReply struct {
	V      int             `json:"v"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *teamster.Error `json:"error,omitempty"`
}

// Validate checks a tool reply.
func (t *ToolReply) Validate() error {
	if err := checkVersion(t.V); err != nil {
		return err
	}
	return checkReplyStatus(t.Status, t.Error, StatusOK, StatusRejected)
}

// Tool call outcomes.
const (
	OutcomeSuccess = "success"
	OutcomeFailure = "failure"
)

// ToolTerminal reports one terminal outcome of a tool call.
type ToolTerminal struct {
	V                int             `json:"v"`
	CallID           string          `json:"callId"`
	Name             string          `json:"name"`
	Args             json.RawMessage `json:"args,omitempty"`
	ExecutionStarted bool            `json:"executionStarted"`
	Outcome          string          `json:"outcome"`
	Error            json.RawMessage `json:"error,omitempty"`
}

// Validate checks a tool terminal report.
func (t *ToolTerminal) Validate() error {
	if err := checkVersion(t.V); err != nil {
		return err
	}
	if err := requireString("callId", t.CallID, maxNameLen); err != nil {
		return err
	}
	if err := requireString("name", t.Name, maxNameLen); err != nil {
		return err
	}
	if t.Outcome != OutcomeSuccess && t.Outcome != OutcomeFailure {
		return invalid("field outcome %q is not success or failure", truncate(t.Outcome, 40))
	}
	return nil
}

// ToolTerminalReply carries the host's canonical settlement of a tool call.
type ToolTerminalReply struct {
	V             int             `json:"v"`
	Status        string          `json:"status"`
	LastToolError json.RawMessage `json:"lastToolError,omitempty"`
	Error         *teamster.Error `json:"error,omitempty"`
}

// Validate checks a tool terminal reply.
func (t *ToolTerminalReply) Validate() error {
	if err := checkVersion(t.V); err != nil {
		return err
	}
	return checkReplyStatus(t.Status, t.Error, StatusOK, StatusRejected)
}

// AssertCurrent asks the host whether its assertion of one source-bound
// item (InjectRequest.HostAssertion) still holds.
type AssertCurrent struct {
	V         int    `json:"v"`
	Assertion string `json:"assertion"`
}

// Validate checks an assertCurrent request.
func (a *AssertCurrent) Validate() error {
	if err := checkVersion(a.V); err != nil {
		return err
	}
	return CheckID("assertion", a.Assertion)
}

// AssertCurrentReply answers an assertCurrent request. Only status ok with
// current true lets the item through; anything else, or no answer in time,
// drops it.
type AssertCurrentReply struct {
	V       int             `json:"v"`
	Status  string          `json:"status"`
	Current bool            `json:"current"`
	Error   *teamster.Error `json:"error,omitempty"`
}

// Validate checks an assertCurrent reply.
func (a *AssertCurrentReply) Validate() error {
	if err := checkVersion(a.V); err != nil {
		return err
	}
	return checkReplyStatus(a.Status, a.Error, StatusOK, StatusRejected)
}

// UserInput is a blocking question to the gateway.
type UserInput struct {
	V        int      `json:"v"`
	Question string   `json:"question"`
	Choices  []string `json:"choices,omitempty"`
}

// Validate checks a user input request.
func (u *UserInput) Validate() error {
	if err := checkVersion(u.V); err != nil {
		return err
	}
	if u.Question == "" {
		return invalid("field question is required")
	}
	return nil
}

// UserInputReply answers a user input request.
type UserInputReply struct {
	V      int             `json:"v"`
	Status string          `json:"status"`
	Answer string          `json:"answer,omitempty"`
	Error  *teamster.Error `json:"error,omitempty"`
}

// Validate checks a user input reply.
func (u *UserInputReply) Validate() error {
	if err := checkVersion(u.V); err != nil {
		return err
	}
	return checkReplyStatus(u.Status, u.Error, StatusOK, StatusRejected)
}

// UsageReport reports the output tokens of one completed model response.
type UsageReport struct {
	V            int    `json:"v"`
	ResponseID   string `json:"responseId"`
	OutputTokens int64  `json:"outputTokens"`
}

// Validate checks a usage report. Non-positive counts are valid on the wire;
// they emit nothing.
func (u *UsageReport) Validate() error {
	if err := checkVersion(u.V); err != nil {
		return err
	}
	return requireString("responseId", u.ResponseID, maxNameLen)
}

// Worker control ops.
const (
	ControlDrain  = "drain"
	ControlResume = "resume"
	ControlStatus = "status"
)

// WorkerControl is the body of teamster.worker.<workerId>.control.
type WorkerControl struct {
	V  int    `json:"v"`
	Op string `json:"op"`
}

// Validate checks a worker control request.
func (c *WorkerControl) Validate() error {
	if err := checkVersion(c.V); err != nil {
		return err
	}
	switch c.Op {
	case ControlDrain, ControlResume, ControlStatus:
		return nil
	}
	return invalid("field op %q is not drain, resume or status", truncate(c.Op, 40))
}

// WorkerControlReply answers a worker control request.
type WorkerControlReply struct {
	V        int             `json:"v"`
	Status   string          `json:"status"`
	State    string          `json:"state,omitempty"`
	Running  int             `json:"running"`
	Attempts []string        `json:"attempts"`
	Error    *teamster.Error `json:"error,omitempty"`
}

// Validate checks a worker control reply: an ok reply says the worker's state.
func (c *WorkerControlReply) Validate() error {
	if err := checkVersion(c.V); err != nil {
		return err
	}
	if err := checkReplyStatus(c.Status, c.Error, StatusOK, StatusRejected); err != nil {
		return err
	}
	if c.State != "" || c.Status == StatusOK {
		if err := checkWorkerState(c.State); err != nil {
			return err
		}
	}
	if c.Running < 0 {
		return invalid("field running is negative")
	}
	for _, a := range c.Attempts {
		// <attemptId>, or <gatewayId>/<attemptId> for a gateway's
		// (teamster.ScopedDisplay).
		t, id, scoped := strings.Cut(a, "/")
		if !scoped {
			t, id = "", t
		}
		if err := optionalID("attempts[] gateway", t); err != nil {
			return err
		}
		if err := CheckID("attempts[]", id); err != nil {
			return err
		}
	}
	return nil
}

// Worker states in the registry.
const (
	WorkerStarting = "starting"
	WorkerActive   = "active"
	WorkerDraining = "draining"
	WorkerStopped  = "stopped"
)

// WorkerEntry is a worker's registry entry in KV TEAMSTER_WORKERS, keyed by
// its worker id and refreshed every heartbeat.
type WorkerEntry struct {
	V           int                  `json:"v"`
	WorkerID    string               `json:"workerId"`
	State       string               `json:"state"`
	Harnesses   []selection.Manifest `json:"harnesses"`
	Slots       int                  `json:"slots"`
	InFlight    int                  `json:"inFlight"`
	Attempts    []string             `json:"attempts,omitempty"`
	HeartbeatMs int64                `json:"heartbeatMs"`
	StartedMs   int64                `json:"startedMs"`
	Version     string               `json:"version,omitempty"`
}

// Validate checks a registry entry.
func (w *WorkerEntry) Validate() error {
	if err := checkVersion(w.V); err != nil {
		return err
	}
	if err := CheckID("workerId", w.WorkerID); err != nil {
		return err
	}
	if err := checkWorkerState(w.State); err != nil {
		return err
	}
	for _, m := range w.Harnesses {
		if err := m.Validate(); err != nil {
			// The manifest's message quotes its ids in full: bound it.
			return invalid("field harnesses: %s", truncate(err.Error(), 200))
		}
	}
	if w.Slots < 0 || w.InFlight < 0 {
		return invalid("fields slots and inFlight are not negative")
	}
	if w.HeartbeatMs < 0 || w.StartedMs < 0 {
		return invalid("fields heartbeatMs and startedMs are not negative")
	}
	return checkIDs("attempts", w.Attempts)
}

func checkWorkerState(s string) error {
	switch s {
	case WorkerStarting, WorkerActive, WorkerDraining, WorkerStopped:
		return nil
	}
	return invalid("field state %q is not a worker state", truncate(s, 40))
}

// checkIDs checks that every entry of a list field is a valid id.
func checkIDs(field string, ids []string) error {
	for _, id := range ids {
		if err := CheckID(field+"[]", id); err != nil {
			return err
		}
	}
	return nil
}

// RouterEntry is a router's entry in KV TEAMSTER_ROUTERS, keyed by its router
// id and refreshed every heartbeat: what `teamster status` shows and compares
// (two routers running different policies answer one submit differently).
type RouterEntry struct {
	V        int    `json:"v"`
	RouterID string `json:"routerId"`
	Version  string `json:"version,omitempty"`
	// PolicyDigest identifies the runtime policy the router selects with
	// (selection.Policy.Digest).
	PolicyDigest string `json:"policyDigest"`
	HeartbeatMs  int64  `json:"heartbeatMs"`
	StartedMs    int64  `json:"startedMs"`
}

// Validate checks a router entry.
func (r *RouterEntry) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := CheckID("routerId", r.RouterID); err != nil {
		return err
	}
	if r.HeartbeatMs < 0 || r.StartedMs < 0 {
		return invalid("fields heartbeatMs and startedMs are not negative")
	}
	return nil
}

// Live reports whether the worker counts as registering its harnesses for
// selection: active or draining.
func (w *WorkerEntry) Live() bool { return w.State == WorkerActive || w.State == WorkerDraining }
