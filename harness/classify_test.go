package harness_test

import (
	"testing"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
)

func TestOutcomeClassification(t *testing.T) {
	type out = harness.Outcome
	cases := []struct {
		name string
		out  out
		want string
	}{
		// Unclassified.
		{"visible text", out{AssistantTexts: []string{"hi"}, PlanText: "p"}, ""},
		{"visible text after blanks", out{AssistantTexts: []string{"", " ", "hi"}}, ""},
		{"NO_REPLY", out{AssistantTexts: []string{"NO_REPLY"}, ReasoningText: "r"}, ""},
		{"NO_REPLY padded", out{AssistantTexts: []string{"  NO_REPLY\n"}}, ""},
		{"NO_REPLY inside other text", out{AssistantTexts: []string{"NO_REPLY please"}}, ""},
		{"lowercase token is text", out{AssistantTexts: []string{"no_reply"}}, ""},

		// Classified.
		{"nothing", out{}, bus.ClassEmpty},
		{"empty texts", out{AssistantTexts: []string{}}, bus.ClassEmpty},
		{"empty string", out{AssistantTexts: []string{""}}, bus.ClassEmpty},
		{"whitespace only", out{AssistantTexts: []string{" \n\t", "  "}}, bus.ClassEmpty},
		{"reasoning only", out{ReasoningText: "thinking"}, bus.ClassReasoningOnly},
		{"reasoning with blank text", out{AssistantTexts: []string{"\n"}, ReasoningText: "thinking"}, bus.ClassReasoningOnly},
		{"whitespace reasoning", out{ReasoningText: " \n "}, bus.ClassEmpty},
		{"plan only", out{PlanText: "1. do it"}, bus.ClassPlanningOnly},
		{"plan beats reasoning", out{ReasoningText: "r", PlanText: "p"}, bus.ClassPlanningOnly},
		{"whitespace plan is no plan", out{ReasoningText: "r", PlanText: "  "}, bus.ClassReasoningOnly},
		{"plan-like reasoning is not a plan", out{ReasoningText: "Plan: 1. read 2. write"}, bus.ClassReasoningOnly},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.out.Classification(); got != tc.want {
				t.Fatalf("Classification() of %+v = %q, want %q", tc.out, got, tc.want)
			}
		})
	}
}
