package bus

import "encoding/json"

// The data of the events a harness emits (partial, agent, tool), as every
// harness sends it. The data of the events the worker emits itself
// (claimed, usage, injection) is ClaimedData, UsageData and InjectionData.

// PartialData is the data of a partial event: a piece of visible assistant
// text, streamed as the turn produces it.
type PartialData struct {
	// Text is the piece of text (a delta: the pieces of a turn, joined,
	// are its visible text).
	Text string `json:"text"`
	// ItemID is the harness's native id of the message the piece belongs
	// to, when it has one (the codex harness's item id); omitted otherwise.
	ItemID string `json:"itemId,omitempty"`
}

// Agent event kinds.
const (
	// AgentReasoning is reasoning text (AgentData).
	AgentReasoning = "reasoning"
	// AgentPlan is explicit plan text (AgentData).
	AgentPlan = "plan"
	// AgentApproval is a native approval request and the harness's decision
	// (ApprovalData).
	AgentApproval = "approval"
)

// AgentData is the data of an agent event of kind AgentReasoning or
// AgentPlan: text the turn produced besides its visible text.
type AgentData struct {
	// Kind is AgentReasoning or AgentPlan.
	Kind string `json:"kind"`
	// Text is the piece of reasoning or plan text; it is always present,
	// even when empty.
	Text string `json:"text"`
}

// Approval decisions (ApprovalData.Decision).
const (
	ApprovalAccepted = "accepted"
	ApprovalDeclined = "declined"
)

// ApprovalData is the data of an agent event of kind AgentApproval: the
// native runtime asked to approve an action and the harness answered it on
// its own (the codex harness, by its allowApprovals setting).
type ApprovalData struct {
	// Kind is AgentApproval.
	Kind string `json:"kind"`
	// Request is the native request that asked for approval (for codex, the
	// app-server's request method, e.g. "item/commandExecution/requestApproval").
	Request string `json:"request,omitempty"`
	// Decision is ApprovalAccepted or ApprovalDeclined.
	Decision string `json:"decision,omitempty"`
}

// ToolData is the data of a tool event: one call of a host tool and its
// outcome, emitted once the host's tool callback answered (or, for a tool
// the turn was not offered, once the harness refused it).
type ToolData struct {
	// CallID is the call's id, as in the ToolCall and ToolTerminal of the
	// same call.
	CallID string `json:"callId"`
	// Name is the tool's name, as the host's tool callback received it.
	Name string `json:"name"`
	// Args are the call's arguments (a JSON object); omitted when the call
	// had none.
	Args json.RawMessage `json:"args,omitempty"`
	// Outcome is OutcomeSuccess or OutcomeFailure.
	Outcome string `json:"outcome"`
	// Result is the tool's result on success (null when the host's reply
	// carried none); omitted on failure.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the failure, the JSON of a *teamster.Error: the host's, or
	// the harness's own when the host refused without one or the turn was
	// not offered the tool; omitted on success.
	Error json.RawMessage `json:"error,omitempty"`
}
