package e2e

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/selection"
)

// The router runs selection on every submit under its runtime policy and the
// live registry, and the reply carries the reason and every candidate.
func TestSelectionRecordReachesTheReply(t *testing.T) {
	policy, err := selection.ParsePolicy("policy.json", []byte(`{
	  "models": {"providers": {"anthropic": {"agentRuntime": {"id": "claude-cli"}}}},
	  "agents": {"defaults": {"agentRuntime": {"id": "codex"}}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	f := fleettest.Start(t, fleettest.Options{Workers: 2, Policy: policy})
	a := fleettest.Attempt("sess-sel", "hi")
	a.Provider, a.ModelID = "anthropic", "claude-opus-5"
	a.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"claude-cli"}}}
	h := submit(t, f, a)
	rec := h.Reply.Selection
	if rec.Runtime != "claude-cli" || rec.RuntimeSource != selection.SourceProvider || rec.SelectedHarnessID != "claude-cli" ||
		rec.SelectedReason != selection.ReasonForcedPlugin || h.Reply.HarnessID != "claude-cli" {
		t.Fatalf("record %+v", rec)
	}
	want := []selection.Candidate{
		{ID: "codex", Label: "Codex", PluginID: "codex", Priority: 100, Reason: "runtimePolicy.compatibleIds does not list codex"},
		{ID: "claude-cli", Label: "Claude CLI", PluginID: "anthropic", Supported: true},
	}
	if d := cmp.Diff(want, rec.Candidates); d != "" {
		t.Fatalf("candidates (-want +got):\n%s", d)
	}
	legacy := false
	for _, n := range rec.Notes {
		if strings.Contains(n, "agents.defaults.agentRuntime") && strings.Contains(n, "ignored") {
			legacy = true
		}
	}
	if !legacy {
		t.Fatalf("notes %q do not say the legacy whole-agent agentRuntime was ignored", rec.Notes)
	}
	if r := result(t, h); r.HarnessID != "claude-cli" {
		t.Fatalf("ran on %s", r.HarnessID)
	}
}
