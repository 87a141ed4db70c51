package claude

import (
	"context"
	"encoding/json"
)

// toolCall runs one gateway tool the model called through the turn's MCP
// server: Host.Tool, a tool event, then Host.ToolTerminal (whose
// lastToolError the outcome keeps). It returns what the model is told and
// whether that is an error. offered says the name is one of the turn's
// tools; any other is refused without reaching the host.
func (t *turn) toolCall(_ context.Context, callID, name string, offered bool, rawArgs json.RawMessage) (string, bool) {
	t.handlers.Add(1)
	defer t.handlers.Done()
	if t.ended.Load() && t.hctx.Err() != nil {
		return "the teamster run of this turn has ended", true
	}
	offered = offered && t.tools[name]
	if offered {
		t.toolRan.Store(true)
	}
	return t.rel.Tool(t.log, callID, name, offered, rawArgs)
}
