package selection

import (
	"slices"
	"testing"
)

// Harness manifests the tests register. Priorities: local-agent 200
// (explicit-only), codex 100, gemini-cli 50 (probed for every provider),
// relay 10 (reproduces overrides), acp 0 (declares the openclaw fallback),
// claude-cli 0.
var (
	codex = Manifest{ID: "codex", Label: "Codex", PluginID: "codex",
		AutoSelection: &AutoSelection{ProviderIDs: []string{"openai"}}, Priority: 100}
	claude = Manifest{ID: "claude-cli", Label: "Claude CLI", PluginID: "anthropic",
		AutoSelection: &AutoSelection{ProviderIDs: []string{"anthropic"}}}
	gemini = Manifest{ID: "gemini-cli", Label: "Gemini CLI", PluginID: "google", Priority: 50}
	local  = Manifest{ID: "local-agent", PluginID: "local",
		AutoSelection: &AutoSelection{ProviderIDs: []string{}}, Priority: 200}
	acp = Manifest{ID: "acp", PluginID: "acp", FallbackRuntime: RuntimeOpenClaw,
		AutoSelection: &AutoSelection{ProviderIDs: []string{"openai"}}}
	relay = Manifest{ID: "relay", PluginID: "relay", ReproducesRequestOverrides: true,
		AutoSelection: &AutoSelection{ProviderIDs: []string{"openai"}}, Priority: 10}

	fleet = []Manifest{codex, claude, gemini, local, acp, relay}
)

// compat is a route whose provider declares the given runtime ids compatible,
// with no request transport overrides.
func compat(ids ...string) Route {
	return Route{RuntimePolicy: &RuntimePolicy{CompatibleIDs: ids}, RequestTransportOverrides: OverridesNone}
}

// present is compat with requestTransportOverrides "present".
func present(ids ...string) Route {
	r := compat(ids...)
	r.RequestTransportOverrides = OverridesPresent
	return r
}

// undeclared is a route whose provider declared no runtimePolicy.
func undeclared() Route { return Route{RequestTransportOverrides: OverridesNone} }

// allRoute lists every fleet harness, so an explicit choice always succeeds
// and a test shows which level of the policy won.
var allRoute = compat("codex", "claude-cli", "gemini-cli", "local-agent", "acp", "relay")

// sessionKey looks like something that must never appear in an error.
const sessionKey = "agent:main:telegram:dm:SECRET-TOKEN-123"

// facts are the facts of an openai/gpt-5.6-sol turn of agent main.
func facts(routes ...Route) Facts {
	return Facts{Provider: "openai", ModelID: "gpt-5.6-sol", SessionKey: sessionKey, AgentID: "main", Routes: routes}
}

// withPin returns f with the session pin and override set.
func withPin(f Facts, id, override string) Facts {
	f.AgentHarnessID, f.AgentHarnessRuntimeOverride = id, override
	return f
}

// with returns f changed by fn.
func with(f Facts, fn func(*Facts)) Facts {
	fn(&f)
	return f
}

// cand is the record entry of m with a support result.
func cand(m Manifest, supported bool, reason string) Candidate {
	return Candidate{ID: m.ID, Label: m.Label, PluginID: m.PluginID, Priority: m.Priority, Supported: supported, Reason: reason}
}

// mustPolicy parses a config named policy.json; "" is no policy (nil).
func mustPolicy(t testing.TB, config string) *Policy {
	t.Helper()
	if config == "" {
		return nil
	}
	p, err := ParsePolicy("policy.json", []byte(config))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	return p
}

// reversed returns a reversed copy of ms.
func reversed(ms []Manifest) []Manifest {
	out := slices.Clone(ms)
	slices.Reverse(out)
	return out
}
