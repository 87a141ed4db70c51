package selection

import (
	"github.com/teamster-fleet/teamster"
)

func selectCases() []selectCase {
	return []selectCase{
		// Session pin.
		{
			rule:   "pin: agentHarnessId beats the agent model entry and the provider runtime",
			config: cfgAgentMainClaude, facts: withPin(facts(allRoute), "codex", ""), registered: fleet,
			want:  outcome{Runtime: "codex", Source: SourcePin, Harness: "codex", Reason: ReasonForcedPlugin},
			notes: []string{`runtime "codex" from session agentHarnessId`},
		},
		{
			rule:   "pin: agentHarnessId beats agentHarnessRuntimeOverride",
			config: cfgAgentMainClaude, facts: withPin(facts(allRoute), "codex", "gemini-cli"), registered: fleet,
			want: outcome{Runtime: "codex", Source: SourcePin, Harness: "codex", Reason: ReasonForcedPlugin},
		},
		{
			rule:   "pin: agentHarnessRuntimeOverride applies when agentHarnessId is empty",
			config: cfgAgentMainClaude, facts: withPin(facts(allRoute), "", "gemini-cli"), registered: fleet,
			want:  outcome{Runtime: "gemini-cli", Source: SourcePin, Harness: "gemini-cli", Reason: ReasonForcedPlugin},
			notes: []string{`runtime "gemini-cli" from session agentHarnessRuntimeOverride`},
		},
		{
			rule:   "pin: agentHarnessId default is ignored and the override applies",
			config: cfgAgentMainClaude, facts: withPin(facts(allRoute), "default", "gemini-cli"), registered: fleet,
			want: outcome{Runtime: "gemini-cli", Source: SourcePin, Harness: "gemini-cli", Reason: ReasonForcedPlugin},
		},
		{
			rule:   "pin: default pins fall through to the model policy",
			config: cfgDefaultsClaude, facts: withPin(facts(allRoute), "default", "default"), registered: fleet,
			want:  outcome{Runtime: "claude-cli", Source: SourceModel, Harness: "claude-cli", Reason: ReasonForcedPlugin},
			notes: []string{`runtime "claude-cli" from policy.json:1: agents.defaults.models["openai/gpt-5.6-sol"].agentRuntime.id`},
		},
		{
			rule:  "pin: a pin applies without any policy",
			facts: withPin(facts(allRoute), "claude-cli", ""), registered: fleet,
			want: outcome{Runtime: "claude-cli", Source: SourcePin, Harness: "claude-cli", Reason: ReasonForcedPlugin},
		},
		{
			rule:  "pin: a pin of auto selects in auto mode with source pin",
			facts: withPin(facts(compat("gemini-cli")), "", "auto"), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourcePin, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
		},

		// Model-level policy.
		{
			rule: "model: the agent's entry beats the defaults entry",
			config: `{"agents":{"defaults":{"models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"claude-cli"}}}},
				"list":[{"id":"main","models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"gemini-cli"}}}}]}}`,
			facts: facts(allRoute), registered: fleet,
			want: outcome{Runtime: "gemini-cli", Source: SourceModel, Harness: "gemini-cli", Reason: ReasonForcedPlugin},
		},
		{
			rule: "model: the defaults entry beats the provider's model row",
			config: `{"models":{"providers":{"openai":{"models":[{"id":"gpt-5.6-sol","agentRuntime":{"id":"gemini-cli"}}]}}},
				"agents":{"defaults":{"models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"claude-cli"}}}}}}`,
			facts: facts(allRoute), registered: fleet,
			want: outcome{Runtime: "claude-cli", Source: SourceModel, Harness: "claude-cli", Reason: ReasonForcedPlugin},
		},
		{
			rule: "model: the provider's model row beats the agent wildcard",
			config: `{"models":{"providers":{"openai":{"models":[{"id":"gpt-5.6-sol","agentRuntime":{"id":"gemini-cli"}}]}}},
				"agents":{"list":[{"id":"main","models":{"openai/*":{"agentRuntime":{"id":"claude-cli"}}}}]}}`,
			facts: facts(allRoute), registered: fleet,
			want:  outcome{Runtime: "gemini-cli", Source: SourceModel, Harness: "gemini-cli", Reason: ReasonForcedPlugin},
			notes: []string{"models.providers.openai.models[0].agentRuntime.id"},
		},
		{
			rule: "model: the agent wildcard beats the defaults wildcard",
			config: `{"agents":{"defaults":{"models":{"openai/*":{"agentRuntime":{"id":"claude-cli"}}}},
				"list":[{"id":"main","models":{"openai/*":{"agentRuntime":{"id":"gemini-cli"}}}}]}}`,
			facts: facts(allRoute), registered: fleet,
			want:  outcome{Runtime: "gemini-cli", Source: SourceModel, Harness: "gemini-cli", Reason: ReasonForcedPlugin},
			notes: []string{`agents.list[0].models["openai/*"].agentRuntime.id`},
		},
		{
			rule: "model: the defaults wildcard beats the provider runtime",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"relay"}}}},
				"agents":{"defaults":{"models":{"openai/*":{"agentRuntime":{"id":"claude-cli"}}}}}}`,
			facts: facts(allRoute), registered: fleet,
			want: outcome{Runtime: "claude-cli", Source: SourceModel, Harness: "claude-cli", Reason: ReasonForcedPlugin},
		},
		{
			rule:   "model: another agent's entry does not apply",
			config: `{"agents":{"list":[{"id":"other","models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"claude-cli"}}}}]}}`,
			facts:  facts(allRoute), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "codex", Reason: ReasonAutoPlugin},
		},
		{
			rule: "model: an entry for another model does not apply",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"relay"}}}},
				"agents":{"defaults":{"models":{"openai/gpt-4.1":{"agentRuntime":{"id":"claude-cli"}}}}}}`,
			facts: facts(allRoute), registered: fleet,
			want: outcome{Runtime: "relay", Source: SourceProvider, Harness: "relay", Reason: ReasonForcedPlugin},
		},
		{
			rule: "model: an explicit auto at model level stops resolution and selects in auto mode",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"claude-cli"}}}},
				"agents":{"defaults":{"models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"auto"}}}}}}`,
			facts: facts(compat("codex", "claude-cli")), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceModel, Harness: "codex", Reason: ReasonAutoPlugin},
		},
		{
			rule: "model: default at model level keeps looking",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"relay"}}}},
				"agents":{"defaults":{"models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"default"}}}}}}`,
			facts: facts(allRoute), registered: fleet,
			want: outcome{Runtime: "relay", Source: SourceProvider, Harness: "relay", Reason: ReasonForcedPlugin},
		},
		{
			rule:   "model: agent ids match case-insensitively",
			config: `{"agents":{"list":[{"id":"Main","models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"gemini-cli"}}}}]}}`,
			facts:  facts(allRoute), registered: fleet,
			want: outcome{Runtime: "gemini-cli", Source: SourceModel, Harness: "gemini-cli", Reason: ReasonForcedPlugin},
		},

		// Provider-level policy and the default.
		{
			rule:   "provider: the provider runtime applies when no model-level setting does",
			config: cfgProviderRelay, facts: facts(allRoute), registered: fleet,
			want:  outcome{Runtime: "relay", Source: SourceProvider, Harness: "relay", Reason: ReasonForcedPlugin},
			notes: []string{`runtime "relay" from policy.json:1: models.providers.openai.agentRuntime.id`},
		},
		{
			rule:   "provider: provider ids match case-insensitively",
			config: `{"models":{"providers":{"OpenAI":{"agentRuntime":{"id":"relay"}}}}}`,
			facts:  facts(allRoute), registered: fleet,
			want: outcome{Runtime: "relay", Source: SourceProvider, Harness: "relay", Reason: ReasonForcedPlugin},
		},
		{
			rule:   "provider: another provider's runtime does not apply",
			config: `{"models":{"providers":{"anthropic":{"agentRuntime":{"id":"claude-cli"}}}}}`,
			facts:  facts(allRoute), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "codex", Reason: ReasonAutoPlugin},
		},
		{
			rule:  "auto: no policy and no pin resolve to auto",
			facts: facts(allRoute), registered: fleet,
			want:    outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "codex", Reason: ReasonAutoPlugin},
			noNotes: true,
		},

		// Legacy whole-agent runtime.
		{
			rule:   "legacy: agents.defaults.agentRuntime is ignored with a note",
			config: `{"agents":{"defaults":{"agentRuntime":{"id":"codex"}}}}`,
			facts:  facts(compat("gemini-cli")), registered: fleet,
			want:  outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
			notes: []string{"policy.json:1: agents.defaults.agentRuntime is a legacy whole-agent runtime and is ignored"},
		},
		{
			rule:   "legacy: agents.list[].agentRuntime is ignored with a note for that agent",
			config: `{"agents":{"list":[{"id":"main","agentRuntime":{"id":"codex"}}]}}`,
			facts:  facts(compat("gemini-cli")), registered: fleet,
			want:  outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
			notes: []string{`agents.list[0].agentRuntime is a legacy whole-agent runtime and is ignored`, `(agent "main")`},
		},
		{
			rule:   "legacy: an agent's legacy note is not added for other agents",
			config: `{"agents":{"list":[{"id":"other","agentRuntime":{"id":"codex"}}]}}`,
			facts:  facts(compat("gemini-cli")), registered: fleet,
			want:    outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
			noNotes: true,
		},

		// Explicit runtimes.
		{
			rule:   "explicit: an id no worker registers is harness_not_registered",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"ghost"}}}}}`,
			facts:  facts(compat("ghost")), registered: fleet,
			want:   outcome{Runtime: "ghost", Source: SourceProvider, Code: teamster.CodeHarnessNotRegistered},
			errHas: []string{`harness "ghost"`, "provider policy", "not registered"},
		},
		{
			rule:  "explicit: a pinned id no worker registers is harness_not_registered",
			facts: withPin(facts(allRoute), "ghost", ""), registered: fleet,
			want:   outcome{Runtime: "ghost", Source: SourcePin, Code: teamster.CodeHarnessNotRegistered},
			errHas: []string{`harness "ghost"`, "session pin"},
		},
		{
			rule:   "explicit: a registered harness without route policy is harness_unsupported_route",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"codex"}}}}}`,
			facts:  facts(undeclared()), registered: []Manifest{codex},
			want:       outcome{Runtime: "codex", Source: SourceProvider, Code: teamster.CodeHarnessUnsupportedRoute},
			candidates: []Candidate{cand(codex, false, "route declares no runtimePolicy")},
			errHas:     []string{`harness "codex"`, "route declares no runtimePolicy"},
		},
		{
			rule:   "explicit: an unsupported harness declaring fallbackRuntime openclaw falls back",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"acp"}}}}}`,
			facts:  facts(compat("codex")), registered: fleet,
			want: outcome{Runtime: "acp", Source: SourceProvider, Harness: RuntimeOpenClaw, Reason: ReasonPluginDeclaredFallbackOpenClaw},
		},
		{
			rule:  "pin: a pinned harness declaring fallbackRuntime openclaw still fails closed on an unsupported route",
			facts: withPin(facts(compat("codex")), "acp", ""), registered: fleet,
			want: outcome{Runtime: "acp", Source: SourcePin, Code: teamster.CodeHarnessUnsupportedRoute},
		},
		{
			rule:   "explicit: openclaw at model level is forced_openclaw even when a harness supports the route",
			config: `{"agents":{"defaults":{"models":{"openai/gpt-5.6-sol":{"agentRuntime":{"id":"openclaw"}}}}}}`,
			facts:  facts(allRoute), registered: fleet,
			want: outcome{Runtime: RuntimeOpenClaw, Source: SourceModel, Harness: RuntimeOpenClaw, Reason: ReasonForcedOpenClaw},
		},
		{
			rule:  "explicit: an openclaw pin is forced_openclaw",
			facts: withPin(facts(allRoute), "openclaw", ""), registered: fleet,
			want: outcome{Runtime: RuntimeOpenClaw, Source: SourcePin, Harness: RuntimeOpenClaw, Reason: ReasonForcedOpenClaw},
		},
		{
			rule:   "explicit: openclaw needs no registered harness",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"openclaw"}}}}}`,
			facts:  facts(), registered: nil,
			want:       outcome{Runtime: RuntimeOpenClaw, Source: SourceProvider, Harness: RuntimeOpenClaw, Reason: ReasonForcedOpenClaw},
			candidates: []Candidate{},
		},
		{
			rule:   "explicit: an explicit-only harness (empty providerIds) is selectable explicitly",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"local-agent"}}}}}`,
			facts:  facts(compat("local-agent")), registered: fleet,
			want: outcome{Runtime: "local-agent", Source: SourceProvider, Harness: "local-agent", Reason: ReasonForcedPlugin},
		},
		{
			rule:   "explicit: autoSelection not listing the provider does not restrict explicit selection",
			config: cfgDefaultsClaude, facts: facts(compat("claude-cli")), registered: fleet,
			want: outcome{Runtime: "claude-cli", Source: SourceModel, Harness: "claude-cli", Reason: ReasonForcedPlugin},
		},
		{
			rule:   "explicit: compatibleIds not listing the harness is harness_unsupported_route",
			config: cfgDefaultsClaude, facts: facts(compat("codex")), registered: fleet,
			want:   outcome{Runtime: "claude-cli", Source: SourceModel, Code: teamster.CodeHarnessUnsupportedRoute},
			errHas: []string{"runtimePolicy.compatibleIds does not list claude-cli", "model policy"},
		},
		{
			rule:   "explicit: requestTransportOverrides present is harness_unsupported_route",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"codex"}}}}}`,
			facts:  facts(present("codex")), registered: fleet,
			want:   outcome{Runtime: "codex", Source: SourceProvider, Code: teamster.CodeHarnessUnsupportedRoute},
			errHas: []string{"requestTransportOverrides present and harness does not reproduce them"},
		},
		{
			rule:   "explicit: requestTransportOverrides present is supported when the manifest reproduces them",
			config: cfgProviderRelay, facts: facts(present("relay")), registered: fleet,
			want: outcome{Runtime: "relay", Source: SourceProvider, Harness: "relay", Reason: ReasonForcedPlugin},
		},
		{
			rule:  "pinned: a pinned harness must still support the prepared route",
			facts: withPin(facts(compat("claude-cli")), "codex", ""), registered: fleet,
			want:   outcome{Runtime: "codex", Source: SourcePin, Code: teamster.CodeHarnessUnsupportedRoute},
			errHas: []string{"does not list codex"},
		},
		{
			rule:  "pinned: a pinned harness with no prepared route fails closed",
			facts: withPin(facts(), "codex", ""), registered: []Manifest{codex},
			want:       outcome{Runtime: "codex", Source: SourcePin, Code: teamster.CodeHarnessUnsupportedRoute},
			candidates: []Candidate{cand(codex, false, "no prepared route")},
		},

		// Auto mode.
		{
			rule:  "auto: the highest-priority supporting harness wins",
			facts: facts(compat("relay", "gemini-cli", "codex")), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "codex", Reason: ReasonAutoPlugin},
			candidates: []Candidate{
				cand(local, false, "autoSelection.providerIds is empty (explicit-only)"),
				cand(codex, true, ""),
				cand(gemini, true, ""),
				cand(relay, true, ""),
				cand(acp, false, "runtimePolicy.compatibleIds does not list acp"),
				cand(claude, false, "provider openai not in autoSelection.providerIds"),
			},
		},
		{
			rule:  "auto: equal priorities are ordered by id ascending",
			facts: facts(compat("beta", "alpha")),
			registered: []Manifest{
				{ID: "beta", Priority: 5}, {ID: "alpha", Priority: 5},
			},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "alpha", Reason: ReasonAutoPlugin},
			candidates: []Candidate{
				{ID: "alpha", Priority: 5, Supported: true},
				{ID: "beta", Priority: 5, Supported: true},
			},
		},
		{
			rule:  "auto: an unsupported higher-priority harness is skipped",
			facts: facts(compat("relay", "gemini-cli")), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
		},
		{
			rule:  "auto: no supporting harness selects the embedded runtime",
			facts: facts(compat("nobody")), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
		},
		{
			rule:  "auto: no registered harness selects the embedded runtime",
			facts: facts(allRoute), registered: nil,
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{},
		},
		{
			rule:  "auto: no prepared route is not support",
			facts: facts(), registered: []Manifest{codex, gemini},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{
				cand(codex, false, "no prepared route"),
				cand(gemini, false, "no prepared route"),
			},
		},
		{
			rule:  "support: a route without runtimePolicy is not support",
			facts: facts(undeclared()), registered: []Manifest{codex, gemini},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{
				cand(codex, false, "route declares no runtimePolicy"),
				cand(gemini, false, "route declares no runtimePolicy"),
			},
		},
		{
			rule:  "support: requestTransportOverrides present is not support",
			facts: facts(present("codex")), registered: []Manifest{codex},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{cand(codex, false, "requestTransportOverrides present and harness does not reproduce them")},
		},
		{
			rule:  "support: requestTransportOverrides present is support when reproducesRequestOverrides",
			facts: facts(present("codex", "relay")), registered: []Manifest{codex, relay},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "relay", Reason: ReasonAutoPlugin},
		},
		{
			rule:       "support: an unknown requestTransportOverrides value counts as present",
			facts:      facts(Route{RuntimePolicy: &RuntimePolicy{CompatibleIDs: []string{"codex"}}, RequestTransportOverrides: "maybe"}),
			registered: []Manifest{codex},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{cand(codex, false, `requestTransportOverrides "maybe" treated as present and harness does not reproduce them`)},
		},
		{
			rule:  "routes: several routes support only the intersection of their ids",
			facts: facts(compat("codex", "gemini-cli"), compat("gemini-cli", "relay")), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
		},
		{
			rule:  "routes: one undeclared route empties the intersection",
			facts: facts(compat("codex", "gemini-cli"), undeclared()), registered: []Manifest{codex, gemini},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{
				cand(codex, false, "route 2 of 2: route declares no runtimePolicy"),
				cand(gemini, false, "route 2 of 2: route declares no runtimePolicy"),
			},
		},
		{
			rule:  "routes: one route with overrides present leaves only harnesses that reproduce them",
			facts: facts(compat("codex", "relay"), present("codex", "relay")), registered: fleet,
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "relay", Reason: ReasonAutoPlugin},
		},
		{
			rule:  "routes: several routes for an explicit harness must all support it",
			facts: withPin(facts(compat("codex"), compat("gemini-cli")), "codex", ""), registered: fleet,
			want:   outcome{Runtime: "codex", Source: SourcePin, Code: teamster.CodeHarnessUnsupportedRoute},
			errHas: []string{"route 2 of 2: runtimePolicy.compatibleIds does not list codex"},
		},
		{
			rule:  "prefix: openai/gpt-* with no route policy never selects codex",
			facts: facts(undeclared()), registered: []Manifest{codex},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
		},
		{
			rule: "prefix: a legacy codex/ model reference alone never selects codex",
			facts: with(facts(undeclared()), func(f *Facts) {
				f.Provider, f.ModelID = "codex", "gpt-5.6-sol"
			}),
			registered: []Manifest{codex, {ID: "codex-any", Priority: 1}},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{
				cand(codex, false, "provider codex not in autoSelection.providerIds"),
				{ID: "codex-any", Priority: 1, Reason: "route declares no runtimePolicy"},
			},
		},
		{
			rule: "support: preparedAuth source harness does not imply support",
			facts: facts(Route{RequestTransportOverrides: OverridesNone,
				PreparedAuth: &PreparedAuth{Source: "harness"}}),
			registered: []Manifest{codex},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
		},
		{
			rule:  "support: compatibleIds naming an unregistered harness selects nothing",
			facts: facts(compat("ghost")), registered: []Manifest{codex},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
		},
		{
			rule:  "autoSelection: an empty providerIds list is explicit-only and never probed",
			facts: facts(compat("local-agent")), registered: []Manifest{local},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
			candidates: []Candidate{cand(local, false, "autoSelection.providerIds is empty (explicit-only)")},
		},
		{
			rule: "autoSelection: a manifest without autoSelection is probed for every provider",
			facts: with(facts(compat("codex", "gemini-cli")), func(f *Facts) {
				f.Provider, f.ModelID = "mistral", "mistral-large"
			}),
			registered: []Manifest{codex, gemini},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
			candidates: []Candidate{
				cand(codex, false, "provider mistral not in autoSelection.providerIds"),
				cand(gemini, true, ""),
			},
		},
		{
			rule:  "autoSelection: a provider not listed is not probed even when the route lists the harness",
			facts: with(facts(compat("codex")), func(f *Facts) { f.Provider = "anthropic" }), registered: []Manifest{codex},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: RuntimeOpenClaw, Reason: ReasonAutoOpenClaw},
		},
		{
			rule:  "autoSelection: provider ids match case-insensitively",
			facts: with(facts(compat("codex")), func(f *Facts) { f.Provider = "OpenAI" }), registered: []Manifest{codex},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "codex", Reason: ReasonAutoPlugin},
		},

		// Registered manifests.
		{
			rule:  "registration: duplicate registrations of one id are folded",
			facts: facts(compat("codex", "gemini-cli")), registered: []Manifest{gemini, codex, codex, gemini, codex},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "codex", Reason: ReasonAutoPlugin},
			candidates: []Candidate{cand(codex, true, ""), cand(gemini, true, "")},
			noNotes:    true,
		},
		{
			rule:  "registration: differing duplicates use the canonical manifest, with a note",
			facts: facts(compat("codex", "gemini-cli")),
			registered: []Manifest{codex, gemini, func() Manifest {
				m := codex
				m.Priority = 5
				return m
			}()},
			want: outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "gemini-cli", Reason: ReasonAutoPlugin},
			candidates: []Candidate{
				cand(gemini, true, ""),
				{ID: "codex", Label: "Codex", PluginID: "codex", Priority: 5, Supported: true},
			},
			notes: []string{"harness codex is registered with differing manifests"},
		},
		{
			rule:  "registration: an invalid manifest (reserved id openclaw) is ignored with a note",
			facts: facts(compat("openclaw", "codex")), registered: []Manifest{{ID: "openclaw", Priority: 1000}, codex},
			want:       outcome{Runtime: RuntimeAuto, Source: SourceAuto, Harness: "codex", Reason: ReasonAutoPlugin},
			candidates: []Candidate{cand(codex, true, "")},
			notes:      []string{`registered harness ignored: harness id "openclaw" is reserved`},
		},
	}
}
