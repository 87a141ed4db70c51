package selection

import "strings"

// Policy is the runtime policy read from an OpenClaw-format config: which
// runtime each provider, model and agent asks for. The zero value and a nil
// *Policy are valid and leave everything to auto. A Policy is immutable once
// parsed and safe for concurrent use.
type Policy struct {
	providers map[string]providerPolicy // by normalized provider id
	defaults  modelSettings             // agents.defaults.models
	agents    map[string]agentPolicy    // by normalized agent id
	// legacyDefaults is the note about an ignored
	// agents.defaults.agentRuntime, "" when there is none.
	legacyDefaults string
}

// providerPolicy is one models.providers.<p> entry.
type providerPolicy struct {
	runtime setting            // models.providers.<p>.agentRuntime.id
	models  map[string]setting // models.providers.<p>.models[id].agentRuntime.id
}

// modelSettings is one "models" map of agents.defaults or of an agent entry.
type modelSettings struct {
	exact    map[string]map[string]setting // provider → model id → setting
	wildcard map[string]setting            // provider → setting of "p/*"
}

// agentPolicy is one agents.list[] entry.
type agentPolicy struct {
	models modelSettings
	// legacy is the note about an ignored agents.list[].agentRuntime.
	legacy string
}

// setting is one configured runtime. A zero setting is "not set".
type setting struct {
	runtime string // a valid runtime id other than "default"
	origin  string // "file:line: key path", for the record
}

func (s setting) set() bool { return s.runtime != "" }

// Resolution is the outcome of runtime resolution: the runtime asked for and
// where the ask came from.
type Resolution struct {
	// Runtime is "auto", "openclaw" or a harness id.
	Runtime string
	// Source is SourcePin, SourceModel, SourceProvider or SourceAuto.
	Source string
	// Origin says which setting decided, for example
	// `policy.json:12: agents.defaults.models["openai/gpt-5"].agentRuntime.id`
	// or "session agentHarnessId"; "" when nothing was set and Runtime is
	// auto by default.
	Origin string
	// Notes explain settings that were ignored (legacy whole-agent runtimes).
	Notes []string
}

// Resolve resolves the runtime for f: the session pin, then the model-level
// settings, then the provider-level setting, else auto. See the package
// documentation for the order and for the values "auto" and "default".
func (p *Policy) Resolve(f Facts) Resolution {
	var notes []string
	var agent agentPolicy
	if p != nil {
		if p.legacyDefaults != "" {
			notes = append(notes, p.legacyDefaults)
		}
		agent = p.agents[normalizeID(f.AgentID)]
		if agent.legacy != "" {
			notes = append(notes, agent.legacy)
		}
	}
	if pinned(f.AgentHarnessID) {
		return Resolution{Runtime: f.AgentHarnessID, Source: SourcePin, Origin: "session agentHarnessId", Notes: notes}
	}
	if pinned(f.AgentHarnessRuntimeOverride) {
		return Resolution{Runtime: f.AgentHarnessRuntimeOverride, Source: SourcePin, Origin: "session agentHarnessRuntimeOverride", Notes: notes}
	}
	if p != nil {
		provider := normalizeID(f.Provider)
		prov := p.providers[provider]
		for _, s := range [...]setting{
			agent.models.exact[provider][f.ModelID],
			p.defaults.exact[provider][f.ModelID],
			prov.models[f.ModelID],
			agent.models.wildcard[provider],
			p.defaults.wildcard[provider],
		} {
			if s.set() {
				return Resolution{Runtime: s.runtime, Source: SourceModel, Origin: s.origin, Notes: notes}
			}
		}
		if prov.runtime.set() {
			return Resolution{Runtime: prov.runtime.runtime, Source: SourceProvider, Origin: prov.runtime.origin, Notes: notes}
		}
	}
	return Resolution{Runtime: RuntimeAuto, Source: SourceAuto, Notes: notes}
}

// pinned reports whether a session pin value counts: set and not "default".
func pinned(v string) bool {
	return v != "" && v != RuntimeDefault
}

// normalizeID is how provider and agent ids are compared: trimmed and lower
// case. It does not allocate for an id that is already normalized.
func normalizeID(s string) string {
	return strings.ToLower(strings.TrimSpace(s))
}
