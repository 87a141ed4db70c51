package bus

import (
	"encoding/json"

	"github.com/teamster-fleet/teamster"
)

// Event types on an attempt's replyTo.
const (
	EventClaimed   = "claimed"
	EventPartial   = "partial"
	EventAgent     = "agent"
	EventTool      = "tool"
	EventUsage     = "usage"
	EventInjection = "injection"
	EventResult    = "result"
)

var eventTypes = map[string]bool{
	EventClaimed: true, EventPartial: true, EventAgent: true, EventTool: true,
	EventUsage: true, EventInjection: true, EventResult: true,
}

// Event is one message on an attempt's replyTo. Seq counts from 1 per attempt
// with no gaps; only a reaper-written result may follow a gap.
type Event struct {
	V         int             `json:"v"`
	AttemptID string          `json:"attemptId"`
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// Validate checks an event.
func (e *Event) Validate() error {
	if err := checkVersion(e.V); err != nil {
		return err
	}
	if err := CheckID("attemptId", e.AttemptID); err != nil {
		return err
	}
	if e.Seq < 1 {
		return invalid("field seq is %d; it counts from 1", e.Seq)
	}
	if !eventTypes[e.Type] {
		return invalid("field type %q is not an event type", truncate(e.Type, 40))
	}
	return nil
}

// ClaimedData is the data of a claimed event.
type ClaimedData struct {
	WorkerID  string `json:"workerId"`
	HarnessID string `json:"harnessId"`
	Fence     string `json:"fence"`
}

// UsageData is the data of a usage event: the run's cumulative output tokens.
type UsageData struct {
	OutputTokens int64 `json:"outputTokens"`
}

// InjectionData is the data of an injection event: one item's admission or
// settlement.
type InjectionData struct {
	InjectionID string        `json:"injectionId"`
	State       string        `json:"state"`
	Code        teamster.Code `json:"code,omitempty"`
}

// Injection item states.
const (
	InjectionAccepted  = "accepted"
	InjectionCommitted = "committed"
	InjectionCancelled = "cancelled"
	InjectionRejected  = "rejected"
)

// Classifications of a completed turn that produced no visible text.
const (
	ClassEmpty         = "empty"
	ClassReasoningOnly = "reasoning-only"
	ClassPlanningOnly  = "planning-only"
)

// Result is an attempt's one terminal result: the data of the result event and
// the body on teamster.result.<attemptId>.
type Result struct {
	V               int              `json:"v"`
	AttemptID       string           `json:"attemptId"`
	Status          teamster.Status  `json:"status"`
	HarnessID       string           `json:"harnessId,omitempty"`
	WorkerID        string           `json:"workerId,omitempty"`
	Fence           string           `json:"fence,omitempty"`
	AssistantTexts  []string         `json:"assistantTexts"`
	Classification  string           `json:"classification,omitempty"`
	LastToolError   json.RawMessage  `json:"lastToolError,omitempty"`
	Usage           Usage            `json:"usage"`
	NativeSession   json.RawMessage  `json:"nativeSession,omitempty"`
	RuntimeArtifact *RuntimeArtifact `json:"runtimeArtifact,omitempty"`
	Error           *teamster.Error  `json:"error,omitempty"`
}

// Usage is a result's usage.
type Usage struct {
	OutputTokens int64 `json:"outputTokens"`
}

// NewErrorResult builds the result of an attempt that ended with err; the status
// follows the code.
func NewErrorResult(attemptID string, err *teamster.Error) *Result {
	return &Result{
		V: Version, AttemptID: attemptID, Status: err.Code.ResultStatus(),
		AssistantTexts: []string{}, Error: err,
	}
}

// Validate checks a result: its status follows its error code, and ok carries
// no error.
func (r *Result) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := CheckID("attemptId", r.AttemptID); err != nil {
		return err
	}
	if err := optionalID("harnessId", r.HarnessID); err != nil {
		return err
	}
	if err := optionalID("workerId", r.WorkerID); err != nil {
		return err
	}
	switch r.Status {
	case teamster.StatusOK:
		if r.Error != nil {
			return invalid("an ok result carries no error")
		}
	case teamster.StatusError, teamster.StatusCancelled, teamster.StatusTimeout:
		if r.Error == nil {
			return invalid("a %s result carries an error", r.Status)
		}
		if r.Error.Code.ResultStatus() != r.Status {
			return invalid("a result with code %s has status %s, not %s", r.Error.Code, r.Error.Code.ResultStatus(), r.Status)
		}
		if r.Error.SideEffects == "" {
			return invalid("a failed result says its sideEffects")
		}
	default:
		return invalid("field status %q is not ok, error, cancelled or timeout", truncate(string(r.Status), 40))
	}
	switch r.Classification {
	case "", ClassEmpty, ClassReasoningOnly, ClassPlanningOnly:
	default:
		return invalid("field classification %q is not empty, reasoning-only or planning-only", truncate(r.Classification, 40))
	}
	if r.Usage.OutputTokens < 0 {
		return invalid("field usage.outputTokens is negative")
	}
	return nil
}

// Outcome is the result's outcome as attempt records store it: "ok", or its
// error code.
func (r *Result) Outcome() string {
	if r.Error != nil {
		return string(r.Error.Code)
	}
	return string(teamster.StatusOK)
}

// Err returns the result's error, nil for ok.
func (r *Result) Err() error {
	if r.Error != nil {
		return r.Error
	}
	return nil
}
