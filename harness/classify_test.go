package harness_test

import (
	"testing"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
)

func TestClassify(t *testing.T) {
	type in = harness.ClassifyInput
	cases := []struct {
		name string
		in   in
		want string
	}{
		// Unclassified.
		{"in flight", in{ReasoningText: "r"}, ""},
		{"in flight without anything", in{}, ""},
		{"visible text", in{Completed: true, AssistantTexts: []string{"hi"}, PlanText: "p"}, ""},
		{"visible text after blanks", in{Completed: true, AssistantTexts: []string{"", " ", "hi"}}, ""},
		{"prompt error", in{Completed: true, PromptError: true}, ""},
		{"prompt error with reasoning", in{Completed: true, PromptError: true, ReasoningText: "r"}, ""},
		{"prompt error with plan", in{Completed: true, PromptError: true, PlanText: "p"}, ""},
		{"NO_REPLY", in{Completed: true, AssistantTexts: []string{"NO_REPLY"}, ReasoningText: "r"}, ""},
		{"NO_REPLY padded", in{Completed: true, AssistantTexts: []string{"  NO_REPLY\n"}}, ""},
		{"silent flag, token dropped", in{Completed: true, Silent: true, PlanText: "p"}, ""},

		// Classified.
		{"empty", in{Completed: true}, bus.ClassEmpty},
		{"empty texts", in{Completed: true, AssistantTexts: []string{}}, bus.ClassEmpty},
		{"empty string", in{Completed: true, AssistantTexts: []string{""}}, bus.ClassEmpty},
		{"whitespace only", in{Completed: true, AssistantTexts: []string{" \n\t", "  "}}, bus.ClassEmpty},
		{"reasoning only", in{Completed: true, ReasoningText: "thinking"}, bus.ClassReasoningOnly},
		{"reasoning with blank text", in{Completed: true, AssistantTexts: []string{"\n"}, ReasoningText: "thinking"}, bus.ClassReasoningOnly},
		{"whitespace reasoning", in{Completed: true, ReasoningText: " \n "}, bus.ClassEmpty},
		{"plan only", in{Completed: true, PlanText: "1. do it"}, bus.ClassPlanningOnly},
		{"plan beats reasoning", in{Completed: true, ReasoningText: "r", PlanText: "p"}, bus.ClassPlanningOnly},
		{"whitespace plan is no plan", in{Completed: true, ReasoningText: "r", PlanText: "  "}, bus.ClassReasoningOnly},
		{"plan-like reasoning is not a plan", in{Completed: true, ReasoningText: "Plan: 1. read 2. write"}, bus.ClassReasoningOnly},
		{"NO_REPLY inside other text is not silent", in{Completed: true, AssistantTexts: []string{"NO_REPLY please"}}, ""},
		{"lowercase token is text", in{Completed: true, AssistantTexts: []string{"no_reply"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := harness.Classify(tc.in); got != tc.want {
				t.Fatalf("Classify(%+v) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestOutcomeClassification(t *testing.T) {
	cases := []struct {
		name string
		out  harness.Outcome
		want string
	}{
		{"text", harness.Outcome{AssistantTexts: []string{"hi"}}, ""},
		{"nothing", harness.Outcome{}, bus.ClassEmpty},
		{"blank text", harness.Outcome{AssistantTexts: []string{"   "}}, bus.ClassEmpty},
		{"reasoning", harness.Outcome{ReasoningText: "r"}, bus.ClassReasoningOnly},
		{"plan", harness.Outcome{ReasoningText: "r", PlanText: "p"}, bus.ClassPlanningOnly},
		{"prompt error", harness.Outcome{PromptError: true, ReasoningText: "r"}, ""},
		{"silent", harness.Outcome{Silent: true}, ""},
		{"NO_REPLY text", harness.Outcome{AssistantTexts: []string{"NO_REPLY"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.out.Classification(); got != tc.want {
				t.Fatalf("Classification() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIsSilentReply(t *testing.T) {
	for text, want := range map[string]bool{
		"NO_REPLY": true, " NO_REPLY ": true, "\nNO_REPLY\t": true,
		"": false, "no_reply": false, "NO_REPLY.": false, "NO REPLY": false, "NO_REPLY NO_REPLY": false,
	} {
		if got := harness.IsSilentReply(text); got != want {
			t.Errorf("IsSilentReply(%q) = %v, want %v", text, got, want)
		}
	}
}
