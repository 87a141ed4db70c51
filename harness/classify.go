package harness

import (
	"strings"

	"github.com/teamster-fleet/teamster/bus"
)

// SilentReplyToken is OpenClaw's intentionally silent reply: a turn whose
// reply is exactly this text (after trimming white space) chose to say
// nothing.
const SilentReplyToken = "NO_REPLY"

// ClassifyInput is what the terminal classification of a turn depends on.
type ClassifyInput struct {
	// Completed says the turn reached its natural end. A failed turn and a
	// turn still in flight are never classified.
	Completed bool
	// PromptError says the turn ended on a prompt error; it is never
	// classified.
	PromptError bool
	// Silent says the turn intentionally replied nothing (SilentReplyToken),
	// for harnesses that drop the token from AssistantTexts; a turn whose
	// texts hold the token is silent too. A silent turn is never classified.
	Silent bool
	// AssistantTexts are the turn's visible assistant replies. Texts that
	// are empty or white space only are not visible.
	AssistantTexts []string
	// ReasoningText is the turn's reasoning, if any.
	ReasoningText string
	// PlanText is the harness's explicit plan text. It alone makes a turn
	// planning-only: a plan is never inferred from assistant prose or
	// reasoning.
	PlanText string
}

// Classify returns the terminal classification of a completed turn that
// produced no visible assistant text, the Go form of OpenClaw's
// classifyAgentHarnessTerminalOutcome: planning-only when the harness set an
// explicit plan text, else reasoning-only when it has reasoning, else empty.
// It returns "" (unclassified) for a turn that is not completed, ended on a
// prompt error, is intentionally silent, or produced visible text. Plan and
// reasoning text that is white space only counts as none.
func Classify(in ClassifyInput) string {
	if !in.Completed || in.PromptError || in.Silent {
		return ""
	}
	for _, t := range in.AssistantTexts {
		if IsSilentReply(t) || visible(t) {
			return ""
		}
	}
	switch {
	case visible(in.PlanText):
		return bus.ClassPlanningOnly
	case visible(in.ReasoningText):
		return bus.ClassReasoningOnly
	default:
		return bus.ClassEmpty
	}
}

// IsSilentReply reports whether text is the intentionally silent reply:
// exactly SilentReplyToken after trimming white space.
func IsSilentReply(text string) bool {
	return strings.TrimSpace(text) == SilentReplyToken
}

// visible reports whether text has anything but white space.
func visible(text string) bool {
	return strings.TrimSpace(text) != ""
}
