package selection

import (
	"strconv"

	"github.com/teamster-fleet/teamster"
)

// Facts are what selection knows about one prepared attempt. None of them is
// secret.
type Facts struct {
	Provider   string
	ModelID    string
	SessionKey string
	AgentID    string
	// AgentHarnessID is the session's persisted harness pin; "" or "default"
	// means no pin.
	AgentHarnessID string
	// AgentHarnessRuntimeOverride is the session's runtime override, used
	// when AgentHarnessID is not set; "" or "default" means none.
	AgentHarnessRuntimeOverride string
	// Routes are the prepared routes: the attempt's single modelProvider, or
	// several when auth preparation left several; nil when none was prepared
	// (which no harness supports).
	Routes []Route
}

// Decision is the outcome of Select.
type Decision struct {
	// Runtime is the resolved runtime: "auto", "openclaw" or a harness id.
	Runtime string
	// RuntimeSource is SourcePin, SourceModel, SourceProvider or SourceAuto.
	RuntimeSource string
	// HarnessID is the harness that runs the attempt, "openclaw" when the
	// embedded runtime does; "" on error.
	HarnessID string
	// Reason is one of the Reason constants; "" on error.
	Reason string
	// Record is the debug record of the selection, filled on error too.
	Record Record
}

// Embedded reports whether the decision leaves the turn to the embedded
// OpenClaw runtime.
func (d Decision) Embedded() bool { return d.HarnessID == RuntimeOpenClaw }

// Select chooses the harness for an attempt described by f under policy p
// (nil means no policy), among the registered manifests (in any order, with
// duplicates). It resolves the runtime (Policy.Resolve), then:
//
//   - "openclaw" selects the embedded runtime (forced_openclaw);
//   - "auto" selects the first probed harness, by priority descending then
//     id, that supports the routes (auto_plugin), else the embedded runtime
//     (auto_openclaw);
//   - a harness id selects that harness when it supports the routes
//     (forced_plugin), the embedded runtime when it does not and its manifest
//     declares fallbackRuntime "openclaw"
//     (plugin_declared_fallback_openclaw), and fails otherwise.
//
// The record lists every valid registered harness once, in probe order, with
// its support result. In auto mode a harness that is not probed for the
// provider is listed as unsupported with the autoSelection reason; for an
// explicit runtime autoSelection does not matter and every harness carries
// its route support result. Notes say where the runtime came from and what
// was ignored.
//
// Errors are *teamster.Error with code harness_not_registered or
// harness_unsupported_route; the returned Decision then carries the runtime,
// its source and the record, with every candidate's support result.
func Select(p *Policy, f Facts, registered []Manifest) (Decision, error) {
	return NewHarnesses(registered).Select(p, f)
}

// Harnesses is a registry as selection reads it: the valid registered
// manifests, one per id, in probe order, and the notes about what was
// ignored. Building it validates and sorts every manifest; a router builds
// it when its registry view changes, not per attempt.
type Harnesses struct {
	list  []Manifest
	notes []string
}

// NewHarnesses prepares registered (in any order, with duplicates) for
// selection.
func NewHarnesses(registered []Manifest) *Harnesses {
	list, notes := harnessSet(registered)
	return &Harnesses{list: list, notes: notes}
}

// Manifest returns the manifest registered under id.
func (h *Harnesses) Manifest(id string) (Manifest, bool) {
	for _, m := range h.list {
		if m.ID == id {
			return m, true
		}
	}
	return Manifest{}, false
}

// List returns the manifests in probe order; the caller must not modify it.
func (h *Harnesses) List() []Manifest { return h.list }

// Select is the package's Select over these harnesses.
func (h *Harnesses) Select(p *Policy, f Facts) (Decision, error) {
	res := p.Resolve(f)
	harnesses, mnotes := h.list, h.notes

	rec := Record{
		Provider:      f.Provider,
		ModelID:       f.ModelID,
		SessionKey:    f.SessionKey,
		AgentID:       f.AgentID,
		Runtime:       res.Runtime,
		RuntimeSource: res.Source,
		Candidates:    make([]Candidate, 0, len(harnesses)),
	}
	if n := len(res.Notes) + len(mnotes); res.Origin != "" || n > 0 {
		rec.Notes = make([]string, 0, n+1)
		if res.Origin != "" {
			rec.Notes = append(rec.Notes, "runtime "+strconv.Quote(res.Runtime)+" from "+res.Origin)
		}
		rec.Notes = append(rec.Notes, res.Notes...)
		rec.Notes = append(rec.Notes, mnotes...)
	}

	auto := res.Runtime == RuntimeAuto
	provider := normalizeID(f.Provider)
	chosen, explicit := -1, -1
	for i, m := range harnesses {
		c := Candidate{ID: m.ID, Label: m.Label, PluginID: m.PluginID, Priority: m.Priority}
		if m.ID == res.Runtime {
			explicit = i
		}
		if ok, why := probed(m, provider); auto && !ok {
			c.Reason = why
		} else {
			c.Supported, c.Reason = Supports(m, f.Routes)
		}
		if auto && c.Supported && chosen < 0 {
			chosen = i
		}
		rec.Candidates = append(rec.Candidates, c)
	}

	d := Decision{Runtime: res.Runtime, RuntimeSource: res.Source}
	switch {
	case res.Runtime == RuntimeOpenClaw:
		d.HarnessID, d.Reason = RuntimeOpenClaw, ReasonForcedOpenClaw
	case auto && chosen >= 0:
		d.HarnessID, d.Reason = harnesses[chosen].ID, ReasonAutoPlugin
	case auto:
		d.HarnessID, d.Reason = RuntimeOpenClaw, ReasonAutoOpenClaw
	case explicit < 0:
		d.Record = rec
		return d, teamster.Errorf(teamster.CodeHarnessNotRegistered,
			"harness %q (runtime from %s) is not registered by any live worker",
			res.Runtime, sourceText(res.Source))
	case rec.Candidates[explicit].Supported:
		d.HarnessID, d.Reason = res.Runtime, ReasonForcedPlugin
	case harnesses[explicit].FallbackRuntime == RuntimeOpenClaw && res.Source != SourcePin:
		// A session pin keeps ownership of the native transcript: switching
		// it to the embedded runtime would fork the conversation, so a
		// pinned harness fails closed even when its manifest declares the
		// fallback (OpenClaw: "explicit or persistent plugin selection
		// fails closed").
		d.HarnessID, d.Reason = RuntimeOpenClaw, ReasonPluginDeclaredFallbackOpenClaw
	default:
		d.Record = rec
		return d, teamster.Errorf(teamster.CodeHarnessUnsupportedRoute,
			"harness %q (runtime from %s) does not support the prepared route: %s; %s",
			res.Runtime, sourceText(res.Source), rec.Candidates[explicit].Reason, noFallback(res.Source))
	}
	rec.SelectedHarnessID, rec.SelectedReason = d.HarnessID, d.Reason
	d.Record = rec
	return d, nil
}

// sourceText is how an error message names a runtime source.
func sourceText(source string) string {
	switch source {
	case SourcePin:
		return "session pin"
	case SourceModel:
		return "model policy"
	case SourceProvider:
		return "provider policy"
	default:
		return source
	}
}

// noFallback says why an unsupported explicit harness did not fall back.
func noFallback(source string) string {
	if source == SourcePin {
		return "a session pin fails closed"
	}
	return "its manifest declares no fallbackRuntime"
}
