package codex

import "encoding/json"

// Payloads of the app-server protocol (v2) that the harness uses, as
// `codex app-server generate-json-schema --experimental` describes them for
// 0.171.0. Readers ignore the many fields the harness does not need.

// Methods the harness calls.
const (
	methodThreadStart       = "thread/start"
	methodThreadResume      = "thread/resume"
	methodThreadUnsubscribe = "thread/unsubscribe"
	methodTurnStart         = "turn/start"
	methodTurnSteer         = "turn/steer"
	methodTurnInterrupt     = "turn/interrupt"
)

// Notifications the harness reads.
const (
	noteTurnCompleted     = "turn/completed"
	noteAgentMessageDelta = "item/agentMessage/delta"
	noteItemCompleted     = "item/completed"
	noteTokenUsage        = "thread/tokenUsage/updated"
	noteRawResponse       = "rawResponse/completed"
	noteError             = "error"
	noteThreadClosed      = "thread/closed"
)

// Server requests the harness answers.
const (
	reqDynamicToolCall      = "item/tool/call"
	reqCommandApproval      = "item/commandExecution/requestApproval"
	reqFileChangeApproval   = "item/fileChange/requestApproval"
	reqPermissionsApproval  = "item/permissions/requestApproval"
	reqLegacyExecApproval   = "execCommandApproval"
	reqLegacyPatchApproval  = "applyPatchApproval"
	reqMCPElicitation       = "mcpServer/elicitation/request"
	reqToolRequestUserInput = "item/tool/requestUserInput"
)

// Turn statuses of turn/completed.
const (
	turnCompleted   = "completed"
	turnInterrupted = "interrupted"
	turnFailed      = "failed"
)

type (
	// threadStartParams start a new thread. ExperimentalRawEvents makes
	// the app-server report each model response's id and usage
	// (rawResponse/completed); it lasts while the thread stays loaded.
	threadStartParams struct {
		Model                 string        `json:"model,omitempty"`
		Cwd                   string        `json:"cwd,omitempty"`
		DynamicTools          []dynamicTool `json:"dynamicTools,omitempty"`
		ExperimentalRawEvents bool          `json:"experimentalRawEvents,omitempty"`
	}
	// dynamicTool is a host tool offered to the model; the app-server asks
	// the harness to run it (item/tool/call). Dynamic tools are stored with
	// the thread and come back when it is resumed.
	dynamicTool struct {
		Type        string          `json:"type"` // "function"
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	// threadResumeParams load a stored thread by id (its rollout in
	// CODEX_HOME). ExcludeTurns keeps the answer small.
	threadResumeParams struct {
		ThreadID     string `json:"threadId"`
		ExcludeTurns bool   `json:"excludeTurns"`
		Model        string `json:"model,omitempty"`
		Cwd          string `json:"cwd,omitempty"`
	}
	// threadResult is the part of thread/start's and thread/resume's
	// answer the harness reads.
	threadResult struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	threadIDParams struct {
		ThreadID string `json:"threadId"`
	}
	unsubscribeResult struct {
		Status string `json:"status"` // notLoaded, notSubscribed, unsubscribed
	}

	// userInput is one input item; the harness sends text.
	userInput struct {
		Type         string   `json:"type"` // "text"
		Text         string   `json:"text"`
		TextElements []string `json:"text_elements"`
	}
	turnStartParams struct {
		ThreadID string      `json:"threadId"`
		Input    []userInput `json:"input"`
	}
	turnResult struct {
		Turn turnInfo `json:"turn"`
	}
	// turnInfo is a turn as the protocol describes it.
	turnInfo struct {
		ID     string     `json:"id"`
		Status string     `json:"status"`
		Error  *turnError `json:"error"`
	}
	turnError struct {
		Message string `json:"message"`
	}
	// turnSteerParams add input to the running turn; the app-server refuses
	// it unless expectedTurnId is the turn running now.
	turnSteerParams struct {
		ThreadID       string      `json:"threadId"`
		ExpectedTurnID string      `json:"expectedTurnId"`
		Input          []userInput `json:"input"`
	}
	turnInterruptParams struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
	}

	// Notifications.
	turnCompletedNote struct {
		ThreadID string   `json:"threadId"`
		Turn     turnInfo `json:"turn"`
	}
	agentMessageDelta struct {
		TurnID string `json:"turnId"`
		ItemID string `json:"itemId"`
		Delta  string `json:"delta"`
	}
	itemCompletedNote struct {
		TurnID string     `json:"turnId"`
		Item   threadItem `json:"item"`
	}
	// threadItem is the part of a completed item the harness reads:
	// agentMessage (text), reasoning (summary, content), plan (text).
	threadItem struct {
		Type    string   `json:"type"`
		ID      string   `json:"id"`
		Text    string   `json:"text"`
		Summary []string `json:"summary"`
		Content []string `json:"content"`
	}
	tokenBreakdown struct {
		TotalTokens  int64 `json:"totalTokens"`
		OutputTokens int64 `json:"outputTokens"`
	}
	tokenUsageNote struct {
		TurnID     string `json:"turnId"`
		TokenUsage struct {
			Total tokenBreakdown `json:"total"`
			Last  tokenBreakdown `json:"last"`
		} `json:"tokenUsage"`
	}
	rawResponseNote struct {
		TurnID     string          `json:"turnId"`
		ResponseID string          `json:"responseId"`
		Usage      *tokenBreakdown `json:"usage"`
	}
	errorNote struct {
		TurnID    string    `json:"turnId"`
		WillRetry bool      `json:"willRetry"`
		Error     turnError `json:"error"`
	}

	// Server requests.
	dynamicToolCallParams struct {
		TurnID    string          `json:"turnId"`
		CallID    string          `json:"callId"`
		Namespace *string         `json:"namespace"`
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dynamicToolCallResult struct {
		ContentItems []toolContent `json:"contentItems"`
		Success      bool          `json:"success"`
	}
	toolContent struct {
		Type string `json:"type"` // "inputText"
		Text string `json:"text"`
	}
	approvalParams struct {
		TurnID string `json:"turnId"`
		ItemID string `json:"itemId"`
	}
	permissionsParams struct {
		TurnID      string          `json:"turnId"`
		Permissions json.RawMessage `json:"permissions"`
	}
)

// textInput is one text input item.
func textInput(text string) []userInput {
	return []userInput{{Type: "text", Text: text, TextElements: []string{}}}
}
