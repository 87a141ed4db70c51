package selection

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/teamster-fleet/teamster"
)

// outcome is what a case compares: the decision's summary and, on error,
// the code.
type outcome struct {
	Runtime, Source, Harness, Reason string
	Code                             teamster.Code
}

type selectCase struct {
	rule       string // the rule of docs/PROTOCOL.md "Selection" the case checks
	config     string // OpenClaw-format policy; "" is no policy
	facts      Facts
	registered []Manifest
	want       outcome
	// candidates, when not nil, is the record's exact candidate list.
	candidates []Candidate
	// notes are substrings that some record note must contain; noNotes
	// asks for no notes at all.
	notes   []string
	noNotes bool
	// errHas are substrings of the error message.
	errHas []string
}

// Policy fragments used by several cases.
const (
	cfgAgentMainClaude = `{"models":{"providers":{"openai":{"agentRuntime":{"id":"relay"}}}},
		"agents":{"list":[{"id":"main","models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"claude-cli"}}}}]}}`
	cfgDefaultsClaude = `{"agents":{"defaults":{"models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"claude-cli"}}}}}}`
	cfgProviderRelay  = `{"models":{"providers":{"openai":{"agentRuntime":{"id":"relay"}}}}}`
)

func TestSelect(t *testing.T) {
	cases := selectCases()
	if len(cases) < 40 {
		t.Fatalf("%d table cases, want at least 40", len(cases))
	}
	rules := map[string]bool{}
	for _, tc := range cases {
		if tc.rule == "" || rules[tc.rule] {
			t.Fatalf("case rule %q is empty or repeated", tc.rule)
		}
		rules[tc.rule] = true
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			p := mustPolicy(t, tc.config)
			d, err := Select(p, tc.facts, tc.registered)

			got := outcome{Runtime: d.Runtime, Source: d.RuntimeSource, Harness: d.HarnessID, Reason: d.Reason,
				Code: teamster.CodeOf(err)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rule %q: outcome mismatch (-want +got):\n%s\nerr: %v", tc.rule, diff, err)
			}
			if tc.candidates != nil {
				if diff := cmp.Diff(tc.candidates, d.Record.Candidates); diff != "" {
					t.Errorf("rule %q: candidates mismatch (-want +got):\n%s", tc.rule, diff)
				}
			}
			checkNotes(t, tc, d.Record.Notes)
			checkRecord(t, tc, d)
			checkError(t, tc, err)

			// The answer must not depend on the registration order.
			d2, err2 := Select(p, tc.facts, reversed(tc.registered))
			if diff := cmp.Diff(d, d2); diff != "" {
				t.Errorf("rule %q: reversed registration changed the decision (-first +reversed):\n%s", tc.rule, diff)
			}
			if cmp.Diff(errText(err), errText(err2)) != "" {
				t.Errorf("rule %q: reversed registration changed the error: %v vs %v", tc.rule, err, err2)
			}
		})
	}
}

func checkNotes(t *testing.T, tc selectCase, notes []string) {
	t.Helper()
	if tc.noNotes && len(notes) != 0 {
		t.Errorf("rule %q: want no notes, got %q", tc.rule, notes)
	}
	for _, want := range tc.notes {
		found := false
		for _, n := range notes {
			found = found || strings.Contains(n, want)
		}
		if !found {
			t.Errorf("rule %q: no note contains %q; notes: %q", tc.rule, want, notes)
		}
	}
}

// checkRecord checks what every record holds, on success and on error.
func checkRecord(t *testing.T, tc selectCase, d Decision) {
	t.Helper()
	r := d.Record
	head := Record{Provider: r.Provider, ModelID: r.ModelID, SessionKey: r.SessionKey, AgentID: r.AgentID,
		Runtime: r.Runtime, RuntimeSource: r.RuntimeSource, SelectedHarnessID: r.SelectedHarnessID, SelectedReason: r.SelectedReason}
	want := Record{Provider: tc.facts.Provider, ModelID: tc.facts.ModelID, SessionKey: tc.facts.SessionKey,
		AgentID: tc.facts.AgentID, Runtime: d.Runtime, RuntimeSource: d.RuntimeSource,
		SelectedHarnessID: d.HarnessID, SelectedReason: d.Reason}
	if diff := cmp.Diff(want, head); diff != "" {
		t.Errorf("rule %q: record head mismatch (-want +got):\n%s", tc.rule, diff)
	}
	if r.Candidates == nil {
		t.Errorf("rule %q: record candidates are nil, want a list", tc.rule)
	}
	for _, c := range r.Candidates {
		if c.Supported == (c.Reason != "") {
			t.Errorf("rule %q: candidate %s: supported=%v with reason %q", tc.rule, c.ID, c.Supported, c.Reason)
		}
	}
}

func checkError(t *testing.T, tc selectCase, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var te *teamster.Error
	if !errors.As(err, &te) {
		t.Fatalf("rule %q: error %v is %T, want *teamster.Error", tc.rule, err, err)
	}
	if !errors.Is(err, &teamster.Error{Code: tc.want.Code}) {
		t.Errorf("rule %q: errors.Is(%v, %s) is false", tc.rule, err, tc.want.Code)
	}
	if strings.Contains(err.Error(), sessionKey) || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("rule %q: error %q leaks the session key", tc.rule, err)
	}
	for _, s := range append([]string{tc.want.Runtime}, tc.errHas...) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("rule %q: error %q does not contain %q", tc.rule, err, s)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSupports checks the exported support function directly.
func TestSupports(t *testing.T) {
	tests := []struct {
		rule   string
		m      Manifest
		routes []Route
		ok     bool
		reason string
	}{
		{"support: a single declaring route", codex, []Route{compat("codex")}, true, ""},
		{"support: no route", codex, nil, false, "no prepared route"},
		{"support: empty overrides read as none", codex, []Route{{RuntimePolicy: &RuntimePolicy{CompatibleIDs: []string{"codex"}}}}, true, ""},
		{"support: empty compatibleIds", codex, []Route{compat()}, false, "runtimePolicy.compatibleIds does not list codex"},
		{"support: ids compare exactly", codex, []Route{compat("Codex")}, false, "runtimePolicy.compatibleIds does not list codex"},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			ok, reason := Supports(tc.m, tc.routes)
			if ok != tc.ok || reason != tc.reason {
				t.Errorf("rule %q: Supports = %v, %q; want %v, %q", tc.rule, ok, reason, tc.ok, tc.reason)
			}
		})
	}
}
