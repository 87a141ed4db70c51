package claude

import "encoding/json"

// The stream-json lines of Claude Code 2.1.328 that the harness reads and
// writes (see the package doc). Fields the harness does not use are left
// out; unknown line types are ignored.

// Line types on the CLI's stdout.
const (
	lineSystem           = "system"
	lineStreamEvent      = "stream_event"
	lineAssistant        = "assistant"
	lineUser             = "user"
	lineResult           = "result"
	lineCommandLifecycle = "command_lifecycle"
	lineControlRequest   = "control_request"
	lineControlResponse  = "control_response"
)

// outLine is one stdout line, decoded as far as its type needs.
type outLine struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	// system/status
	Status string `json:"status,omitempty"`
	// stream_event
	Event *streamEvent `json:"event,omitempty"`
	// assistant, user
	Message         *apiMessage `json:"message,omitempty"`
	ParentToolUseID *string     `json:"parent_tool_use_id,omitempty"`
	IsReplay        bool        `json:"isReplay,omitempty"`
	UUID            string      `json:"uuid,omitempty"`
	// result
	IsError         bool            `json:"is_error,omitempty"`
	Result          string          `json:"result,omitempty"`
	Errors          []string        `json:"errors,omitempty"`
	TerminalReason  string          `json:"terminal_reason,omitempty"`
	QueuedTurnCount int             `json:"queued_turn_count,omitempty"`
	APIErrorStatus  json.RawMessage `json:"api_error_status,omitempty"`
	// command_lifecycle
	CommandUUID string `json:"command_uuid,omitempty"`
	State       string `json:"state,omitempty"`
	// control_request (from the CLI), control_response
	RequestID string          `json:"request_id,omitempty"`
	Request   json.RawMessage `json:"request,omitempty"`
	Response  json.RawMessage `json:"response,omitempty"`
}

// topLevel reports whether an assistant or stream line belongs to the main
// conversation (not a subagent's).
func (l *outLine) topLevel() bool { return l.ParentToolUseID == nil || *l.ParentToolUseID == "" }

// streamEvent is a Messages API stream event, as the CLI relays it.
type streamEvent struct {
	Type         string        `json:"type"`
	Index        int           `json:"index"`
	Message      *apiMessage   `json:"message,omitempty"`
	ContentBlock *contentBlock `json:"content_block,omitempty"`
	Delta        *eventDelta   `json:"delta,omitempty"`
	Usage        *apiUsage     `json:"usage,omitempty"`
}

type eventDelta struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	Thinking string `json:"thinking,omitempty"`
}

// apiMessage is a Messages API message.
type apiMessage struct {
	ID      string          `json:"id,omitempty"`
	Role    string          `json:"role,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
	Usage   *apiUsage       `json:"usage,omitempty"`
}

type apiUsage struct {
	OutputTokens int64 `json:"output_tokens"`
}

// contentBlock is one content block of a message.
type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// blocks decodes a message's content (a string is one text block).
func (m *apiMessage) blocks() []contentBlock {
	if m == nil || len(m.Content) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []contentBlock{{Type: "text", Text: s}}
	}
	var bs []contentBlock
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

// Lines the harness writes on the CLI's stdin.
type (
	// userLine is a user message: the turn's prompt, or steered input.
	userLine struct {
		Type            string      `json:"type"` // "user"
		Message         userMessage `json:"message"`
		ParentToolUseID *string     `json:"parent_tool_use_id"`
		UUID            string      `json:"uuid"`
		// Priority "next" delivers steered input at the running turn's
		// next model request without abandoning the one in flight.
		Priority string `json:"priority,omitempty"`
	}
	userMessage struct {
		Role    string      `json:"role"` // "user"
		Content []textBlock `json:"content"`
	}
	textBlock struct {
		Type string `json:"type"` // "text"
		Text string `json:"text"`
	}
	// controlRequest is a control request to the CLI (interrupt).
	controlRequest struct {
		Type      string         `json:"type"` // "control_request"
		RequestID string         `json:"request_id"`
		Request   map[string]any `json:"request"`
	}
	// controlErrorResponse refuses a control request from the CLI.
	controlErrorResponse struct {
		Type     string            `json:"type"` // "control_response"
		Response controlErrorInner `json:"response"`
	}
	controlErrorInner struct {
		Subtype   string `json:"subtype"` // "error"
		RequestID string `json:"request_id"`
		Error     string `json:"error"`
	}
)

func newUserLine(uuid, text, priority string) userLine {
	return userLine{Type: lineUser, UUID: uuid, Priority: priority,
		Message: userMessage{Role: "user", Content: []textBlock{{Type: "text", Text: text}}}}
}

// Command lifecycle states of a user message the harness wrote.
const (
	cmdQueued    = "queued"
	cmdStarted   = "started"
	cmdCompleted = "completed"
	cmdCancelled = "cancelled"
)
