package claude

import (
	"slices"
	"strings"

	"github.com/teamster-fleet/teamster/bus"
)

// offeredTools are the attempt's tools the model may call: all of them, or
// those toolsAllow names ("*" allows all; an empty list none).
func offeredTools(a *bus.Attempt) map[string]bool {
	out := map[string]bool{}
	for _, tool := range a.Tools {
		if allows(a.ToolsAllow, tool.Name) {
			out[tool.Name] = true
		}
	}
	return out
}

// allows reports whether toolsAllow (nil: no restriction) lets name run.
func allows(allow *[]string, name string) bool {
	if allow == nil {
		return true
	}
	for _, n := range *allow {
		if n == name || strings.TrimSpace(n) == "*" {
			return true
		}
	}
	return false
}

// allowedBuiltins are the built-in tools of the settings that the attempt's
// toolsAllow lets run, in the settings' order.
func allowedBuiltins(builtins []string, allow *[]string) []string {
	var out []string
	for _, b := range builtins {
		if allows(allow, b) && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}
