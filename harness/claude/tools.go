package claude

import (
	"slices"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// allowedBuiltins are the built-in tools of the settings that the attempt's
// toolsAllow lets run, in the settings' order.
func allowedBuiltins(builtins []string, allow *[]string) []string {
	var out []string
	for _, b := range builtins {
		if nativecli.Allows(allow, b) && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}
