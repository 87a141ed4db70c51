package harness

import (
	"strings"

	"github.com/teamster-fleet/teamster/bus"
)

// Classification returns the terminal classification of the completed turn,
// the Go form of OpenClaw's classifyAgentHarnessTerminalOutcome: "" when it
// produced visible assistant text (an intentionally silent NO_REPLY is such
// a text, so it is never classified either); else planning-only when the
// harness set an explicit plan text, reasoning-only when it has reasoning,
// else empty. Text that is white space only counts as none; a plan is never
// inferred from assistant prose or reasoning.
func (o *Outcome) Classification() string {
	for _, t := range o.AssistantTexts {
		if visible(t) {
			return ""
		}
	}
	switch {
	case visible(o.PlanText):
		return bus.ClassPlanningOnly
	case visible(o.ReasoningText):
		return bus.ClassReasoningOnly
	default:
		return bus.ClassEmpty
	}
}

// visible reports whether text has anything but white space.
func visible(text string) bool {
	return strings.TrimSpace(text) != ""
}
