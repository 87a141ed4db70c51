package selection

// Runtime sources: where the resolved runtime came from.
const (
	SourcePin      = "pin"
	SourceModel    = "model"
	SourceProvider = "provider"
	SourceAuto     = "auto"
)

// Selection reasons.
const (
	ReasonForcedPlugin                   = "forced_plugin"
	ReasonForcedOpenClaw                 = "forced_openclaw"
	ReasonAutoPlugin                     = "auto_plugin"
	ReasonAutoOpenClaw                   = "auto_openclaw"
	ReasonPluginDeclaredFallbackOpenClaw = "plugin_declared_fallback_openclaw"
)

// Record is the debug record of one selection, OpenClaw's "agent harness
// selected" record: what was asked, what was resolved, and every candidate's
// support result. It travels in the submit reply.
type Record struct {
	Provider          string      `json:"provider"`
	ModelID           string      `json:"modelId"`
	SessionKey        string      `json:"sessionKey,omitempty"`
	AgentID           string      `json:"agentId,omitempty"`
	Runtime           string      `json:"runtime"`
	RuntimeSource     string      `json:"runtimeSource"`
	SelectedHarnessID string      `json:"selectedHarnessId,omitempty"`
	SelectedReason    string      `json:"selectedReason,omitempty"`
	Candidates        []Candidate `json:"candidates"`
	// Notes explain decisions a reader might not expect, for example that a
	// legacy whole-agent agentRuntime was ignored.
	Notes []string `json:"notes,omitempty"`
}

// Candidate is one registered harness's support result.
type Candidate struct {
	ID        string `json:"id"`
	Label     string `json:"label,omitempty"`
	PluginID  string `json:"pluginId,omitempty"`
	Supported bool   `json:"supported"`
	Priority  int    `json:"priority"`
	Reason    string `json:"reason,omitempty"`
}
