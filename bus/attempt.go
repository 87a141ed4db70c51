package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/delegation"
	"github.com/teamster-fleet/teamster/selection"
)

// Defaults and bounds of an attempt's timeouts (docs/PROTOCOL.md, "Envelopes").
const (
	DefaultTimeoutMs           = 600_000
	DefaultSettlementTimeoutMs = 30_000
	DefaultQueueTimeoutMs      = 600_000
	MaxTimeoutMs               = 86_400_000
	MaxSettlementTimeoutMs     = 3_600_000
)

// Attempt is a prepared attempt: the submit body, and, once the router has
// given it an id and defaults, the message on teamster.attempt.<harnessId>.
// Secrets never travel in it: AuthProfileRef names a profile that the worker
// resolves locally.
type Attempt struct {
	V                           int               `json:"v"`
	AttemptID                   string            `json:"attemptId,omitempty"`
	RunID                       string            `json:"runId,omitempty"`
	AgentID                     string            `json:"agentId"`
	SessionKey                  string            `json:"sessionKey"`
	SessionID                   string            `json:"sessionId"`
	StorePath                   string            `json:"storePath,omitempty"`
	Provider                    string            `json:"provider"`
	ModelID                     string            `json:"modelId"`
	ModelProvider               *selection.Route  `json:"modelProvider,omitempty"`
	Routes                      []selection.Route `json:"routes,omitempty"`
	AgentHarnessID              string            `json:"agentHarnessId,omitempty"`
	AgentHarnessRuntimeOverride string            `json:"agentHarnessRuntimeOverride,omitempty"`
	ModelSelectionLocked        bool              `json:"modelSelectionLocked,omitempty"`
	Prompt                      string            `json:"prompt"`
	Images                      []json.RawMessage `json:"images,omitempty"`
	Tools                       []Tool            `json:"tools,omitempty"`
	// ToolsAllow nil means no restriction; an empty list is restrictive.
	ToolsAllow             *[]string `json:"toolsAllow,omitempty"`
	TimeoutMs              int64     `json:"timeoutMs,omitempty"`
	SettlementTimeoutMs    *int64    `json:"settlementTimeoutMs,omitempty"`
	QueueTimeoutMs         int64     `json:"queueTimeoutMs,omitempty"`
	ReplyTo                string    `json:"replyTo,omitempty"`
	HostID                 string    `json:"hostId,omitempty"`
	CaptureRuntimeArtifact bool      `json:"captureRuntimeArtifact,omitempty"`
	// StageReplyMedia asks the worker, once the harness returned ok, to let
	// the host read reply attachments from the run's workspace (the
	// replyMedia callback and teamster.run.<attemptId>.read); it needs a
	// hostId and a harness with a workspace.
	StageReplyMedia bool `json:"stageReplyMedia,omitempty"`
	// Operation is what the attempt asks for: a turn (""), or a
	// settled-tool finalization (OperationSettledToolFinalization).
	Operation               string           `json:"operation,omitempty"`
	ExpectedRuntimeArtifact *RuntimeArtifact `json:"expectedRuntimeArtifact,omitempty"`
	AuthProfileRef          string           `json:"authProfileRef,omitempty"`
	// Tenant is the gateway the attempt belongs to ("" for the unnamed
	// tenant): set by the router from the subject the attempt came on (a
	// delegate's is the gateway it is bound to), never from a submit body,
	// which may not carry it. Its session key and attempt id live in the
	// tenant's namespace (ScopedSessionKey, ScopedID).
	Tenant string `json:"tenant,omitempty"`
}

// ScopedSessionKey is the attempt's session key in its tenant's namespace
// (teamster.Scope): what names the session's keys in Redis.
func (a *Attempt) ScopedSessionKey() string { return teamster.Scope(a.Tenant, a.SessionKey) }

// ScopedID is the attempt's id in its tenant's namespace: what names it in
// Redis, on the worker and in the fleet's subjects.
func (a *Attempt) ScopedID() string { return teamster.Scope(a.Tenant, a.AttemptID) }

// OperationSettledToolFinalization is OpenClaw's settled-turn finalization
// as a fleet operation: after a turn whose tool calls all settled without a
// visible answer, one restricted, tool-less follow-up on the session's
// native thread (harness.Finalizer), under the session's lease and in its
// order like any turn.
const OperationSettledToolFinalization = "settled-tool-finalization"

// Tool is one host tool offered to the harness.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// RuntimeArtifact identifies the exact native runtime that ran an attempt.
type RuntimeArtifact struct {
	ID          string `json:"id"`
	Fingerprint string `json:"fingerprint"`
}

// submitBody is how a submit body is read: an Attempt, plus the one field a
// submit body must never carry. A delegate's identity is its subject.
type submitBody struct {
	Attempt
	Delegate json.RawMessage `json:"delegate,omitempty"`
}

// DecodeSubmit reads a submit body: an attempt that must not carry a
// "delegate" field. The returned attempt has its defaults applied.
func DecodeSubmit(b []byte) (*Attempt, error) {
	var body submitBody
	if err := Decode(b, &body); err != nil {
		return nil, err
	}
	a := body.Attempt
	a.ApplyDefaults()
	return &a, nil
}

// Validate checks a submit body.
func (s *submitBody) Validate() error {
	if s.Delegate != nil {
		return invalid("field delegate is not allowed in a submit body; a delegate's identity is its subject")
	}
	if s.Tenant != "" {
		return invalid("field tenant is not allowed in a submit body; a gateway's identity is its subject")
	}
	return s.Attempt.Validate()
}

// DecodeAttempt reads an attempt as workers receive it from the stream.
func DecodeAttempt(b []byte) (*Attempt, error) {
	var a Attempt
	if err := Decode(b, &a); err != nil {
		return nil, err
	}
	a.ApplyDefaults()
	return &a, nil
}

// AttemptDigest identifies the attempt a submit describes: SHA-256 (hex) of
// the normalised attempt as encoded (id assigned, defaults applied), without
// replyTo, and of the delegate it came from ("" for the owner). An attempt id
// is bound to the digest of the attempt first accepted under it, so a
// resubmit carrying anything else under that id is refused. replyTo is left
// out because where events go is the submitter's, not the attempt's: a
// gateway that resubmits from a new connection names a new inbox, and the
// events keep going where the attempt was accepted to send them.
func AttemptDigest(a *Attempt, delegate string) (string, error) {
	c := *a
	c.ReplyTo = ""
	b, err := Encode(&c)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(delegate))
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Validate checks every field of an attempt against the contract.
func (a *Attempt) Validate() error {
	if err := checkVersion(a.V); err != nil {
		return err
	}
	if err := optionalID("attemptId", a.AttemptID); err != nil {
		return err
	}
	for _, f := range []struct {
		name, val string
		max       int
	}{
		{"sessionKey", a.SessionKey, maxKeyLen},
		{"sessionId", a.SessionID, maxNameLen},
		{"agentId", a.AgentID, maxNameLen},
		{"provider", a.Provider, maxNameLen},
		{"modelId", a.ModelID, maxNameLen},
	} {
		if err := requireString(f.name, f.val, f.max); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name, val string
		max       int
	}{
		{"runId", a.RunID, maxNameLen},
		{"storePath", a.StorePath, maxKeyLen},
		{"authProfileRef", a.AuthProfileRef, maxNameLen},
	} {
		if err := optionalString(f.name, f.val, f.max); err != nil {
			return err
		}
	}
	if err := optionalID("agentHarnessId", a.AgentHarnessID); err != nil {
		return err
	}
	if err := optionalID("agentHarnessRuntimeOverride", a.AgentHarnessRuntimeOverride); err != nil {
		return err
	}
	if a.Operation != "" && a.Operation != OperationSettledToolFinalization {
		return invalid("field operation %q is not %s", truncate(a.Operation, 40), OperationSettledToolFinalization)
	}
	if a.Operation != "" && (a.ToolsAllow == nil || len(*a.ToolsAllow) > 0 || len(a.Tools) > 0) {
		return invalid("a %s takes no tools: toolsAllow is [] and tools is absent", a.Operation)
	}
	if err := optionalID("hostId", a.HostID); err != nil {
		return err
	}
	if err := optionalID("tenant", a.Tenant); err != nil {
		return err
	}
	if a.ReplyTo != "" && !ValidReplySubject(a.ReplyTo) {
		return invalid("field replyTo is not a valid reply subject")
	}
	if a.ModelProvider != nil {
		if err := validateRoute("modelProvider", a.ModelProvider); err != nil {
			return err
		}
	}
	for i := range a.Routes {
		if err := validateRoute("routes", &a.Routes[i]); err != nil {
			return err
		}
	}
	for _, img := range a.Images {
		if len(img) == 0 || img[0] != '{' {
			return invalid("field images: each image is an object")
		}
	}
	for _, t := range a.Tools {
		if err := requireString("tools[].name", t.Name, maxNameLen); err != nil {
			return err
		}
		if len(t.InputSchema) > 0 && t.InputSchema[0] != '{' && string(t.InputSchema) != "null" {
			return invalid("field tools[].inputSchema is not an object")
		}
	}
	if a.ToolsAllow != nil {
		for _, n := range *a.ToolsAllow {
			if err := requireString("toolsAllow[]", n, maxNameLen); err != nil {
				return err
			}
		}
	}
	if a.TimeoutMs != 0 {
		if err := checkRange("timeoutMs", a.TimeoutMs, 1, MaxTimeoutMs); err != nil {
			return err
		}
	}
	if a.QueueTimeoutMs != 0 {
		if err := checkRange("queueTimeoutMs", a.QueueTimeoutMs, 1, MaxTimeoutMs); err != nil {
			return err
		}
	}
	if a.SettlementTimeoutMs != nil {
		if err := checkRange("settlementTimeoutMs", *a.SettlementTimeoutMs, 0, MaxSettlementTimeoutMs); err != nil {
			return err
		}
	}
	if r := a.ExpectedRuntimeArtifact; r != nil {
		if err := requireString("expectedRuntimeArtifact.id", r.ID, maxNameLen); err != nil {
			return err
		}
		if err := requireString("expectedRuntimeArtifact.fingerprint", r.Fingerprint, maxNameLen); err != nil {
			return err
		}
	}
	return nil
}

func validateRoute(field string, r *selection.Route) error {
	switch r.RequestTransportOverrides {
	case "", selection.OverridesNone, selection.OverridesPresent:
	default:
		return invalid("field %s.requestTransportOverrides is not none or present", field)
	}
	if r.RuntimePolicy != nil {
		for _, id := range r.RuntimePolicy.CompatibleIDs {
			if !ValidID(id) {
				return invalid("field %s.runtimePolicy.compatibleIds holds an invalid id", field)
			}
		}
	}
	if r.PreparedAuth != nil {
		if err := optionalString(field+".preparedAuth.source", r.PreparedAuth.Source, maxNameLen); err != nil {
			return err
		}
	}
	return nil
}

// ApplyDefaults fills the timeouts the submitter left out.
func (a *Attempt) ApplyDefaults() {
	if a.TimeoutMs == 0 {
		a.TimeoutMs = DefaultTimeoutMs
	}
	if a.QueueTimeoutMs == 0 {
		a.QueueTimeoutMs = DefaultQueueTimeoutMs
	}
	if a.SettlementTimeoutMs == nil {
		d := int64(DefaultSettlementTimeoutMs)
		a.SettlementTimeoutMs = &d
	}
}

// Timeout is the attempt's execution timeout.
func (a *Attempt) Timeout() time.Duration { return time.Duration(a.TimeoutMs) * time.Millisecond }

// QueueTimeout is how long the attempt may wait, from acceptance to claim.
func (a *Attempt) QueueTimeout() time.Duration {
	return time.Duration(a.QueueTimeoutMs) * time.Millisecond
}

// SettlementTimeout is the harness's grace (settlementTimeoutMs): how long it
// has to return once its turn's context has ended.
func (a *Attempt) SettlementTimeout() time.Duration {
	if a.SettlementTimeoutMs == nil {
		return DefaultSettlementTimeoutMs * time.Millisecond
	}
	return time.Duration(*a.SettlementTimeoutMs) * time.Millisecond
}

// SelectionRoutes returns the prepared routes: Routes when the auth preparation
// left several, else the single ModelProvider (nil when none was prepared).
func (a *Attempt) SelectionRoutes() []selection.Route {
	if len(a.Routes) > 0 {
		return a.Routes
	}
	if a.ModelProvider != nil {
		return []selection.Route{*a.ModelProvider}
	}
	return nil
}

// SubmitReply answers a submit.
type SubmitReply struct {
	V         int               `json:"v"`
	Status    string            `json:"status"`
	AttemptID string            `json:"attemptId,omitempty"`
	HarnessID string            `json:"harnessId,omitempty"`
	Selection *selection.Record `json:"selection,omitempty"`
	Error     *teamster.Error   `json:"error,omitempty"`
}

// Validate checks a submit reply.
func (r *SubmitReply) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := checkReplyStatus(r.Status, r.Error, StatusAccepted, StatusFallback, StatusRejected); err != nil {
		return err
	}
	if r.Status != StatusRejected {
		if err := CheckID("attemptId", r.AttemptID); err != nil {
			return err
		}
	}
	return optionalID("harnessId", r.HarnessID)
}

// Err returns the reply's error, nil unless it was rejected.
func (r *SubmitReply) Err() error {
	if r.Error != nil {
		return r.Error
	}
	return nil
}

// DelegationRequest is what the delegated-execution check knows of the
// attempt, submitted by delegate.
func (a *Attempt) DelegationRequest(delegate string) delegation.Request {
	return delegation.Request{
		Delegate: delegate, SessionKey: a.SessionKey, SessionID: a.SessionID, StorePath: a.StorePath, AgentID: a.AgentID,
		ModelSelectionLocked: a.ModelSelectionLocked, AgentHarnessID: a.AgentHarnessID,
		AgentHarnessRuntimeOverride: a.AgentHarnessRuntimeOverride,
	}
}
