package selection

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/teamster-fleet/teamster"
	"pgregory.net/rapid"
)

// Small pools, so that generated manifests collide on ids (duplicates, some
// of them differing) and routes name registered harnesses often.
var (
	propIDs       = []string{"alpha", "beta", "codex", "gemini-cli", "relay"}
	propProviders = []string{"openai", "anthropic", "OpenAI", "mistral"}
)

func genManifest() *rapid.Generator[Manifest] {
	return rapid.Custom(func(t *rapid.T) Manifest {
		m := Manifest{
			ID:                         rapid.SampledFrom(propIDs).Draw(t, "id"),
			Priority:                   rapid.IntRange(-2, 2).Draw(t, "priority"),
			ReproducesRequestOverrides: rapid.Bool().Draw(t, "reproduces"),
			FallbackRuntime:            rapid.SampledFrom([]string{"", RuntimeOpenClaw}).Draw(t, "fallback"),
			Label:                      rapid.SampledFrom([]string{"", "L"}).Draw(t, "label"),
		}
		switch rapid.IntRange(0, 2).Draw(t, "autoSelection") {
		case 0: // nil: probed for every provider
		case 1:
			m.AutoSelection = &AutoSelection{ProviderIDs: []string{}}
		default:
			m.AutoSelection = &AutoSelection{ProviderIDs: rapid.SliceOfN(rapid.SampledFrom(propProviders), 1, 3).Draw(t, "providerIds")}
		}
		return m
	})
}

func genRoute() *rapid.Generator[Route] {
	return rapid.Custom(func(t *rapid.T) Route {
		r := Route{RequestTransportOverrides: rapid.SampledFrom([]string{"", OverridesNone, OverridesPresent}).Draw(t, "overrides")}
		if rapid.IntRange(0, 4).Draw(t, "declared") > 0 {
			ids := rapid.SliceOfN(rapid.SampledFrom(append(slices.Clone(propIDs), "ghost")), 0, 4).Draw(t, "compatibleIds")
			r.RuntimePolicy = &RuntimePolicy{CompatibleIDs: ids}
		}
		if rapid.Bool().Draw(t, "preparedAuth") {
			r.PreparedAuth = &PreparedAuth{Source: "harness"}
		}
		return r
	})
}

func genFacts(pins []string) *rapid.Generator[Facts] {
	return rapid.Custom(func(t *rapid.T) Facts {
		return Facts{
			Provider:                    rapid.SampledFrom(propProviders).Draw(t, "provider"),
			ModelID:                     "m",
			AgentID:                     "main",
			AgentHarnessID:              rapid.SampledFrom(pins).Draw(t, "agentHarnessId"),
			AgentHarnessRuntimeOverride: rapid.SampledFrom(pins).Draw(t, "agentHarnessRuntimeOverride"),
			Routes:                      rapid.SliceOfN(genRoute(), 0, 3).Draw(t, "routes"),
		}
	})
}

// someSupports reports whether any registration of id supports the routes
// (and, in auto mode, is probed for the provider). It is an oracle written
// independently of Supports: the intersection of the routes' compatible ids,
// and whether any route carries overrides.
func someSupports(registered []Manifest, id string, f Facts, auto bool) bool {
	if len(f.Routes) == 0 {
		return false
	}
	var common map[string]bool
	overrides := false
	for i, r := range f.Routes {
		overrides = overrides || (r.RequestTransportOverrides != "" && r.RequestTransportOverrides != OverridesNone)
		ids := map[string]bool{}
		if r.RuntimePolicy != nil {
			for _, c := range r.RuntimePolicy.CompatibleIDs {
				if i == 0 || common[c] {
					ids[c] = true
				}
			}
		}
		common = ids
	}
	for _, m := range registered {
		if m.ID != id || !common[id] || overrides && !m.ReproducesRequestOverrides {
			continue
		}
		if auto && m.AutoSelection != nil && !slices.ContainsFunc(m.AutoSelection.ProviderIDs, func(p string) bool {
			return strings.EqualFold(p, f.Provider)
		}) {
			continue
		}
		return true
	}
	return false
}

// agreed reports whether every registration of id is the same manifest.
func agreed(registered []Manifest, id string) bool {
	var first *Manifest
	for i := range registered {
		if registered[i].ID != id {
			continue
		}
		if first == nil {
			first = &registered[i]
		} else if compareManifests(*first, registered[i]) != 0 {
			return false
		}
	}
	return true
}

// checkOrderIndependent selects again with the registrations permuted.
func checkOrderIndependent(t *rapid.T, f Facts, registered []Manifest, d Decision, err error) {
	perm := rapid.Permutation(registered).Draw(t, "permuted")
	d2, err2 := Select(nil, f, perm)
	if diff := cmp.Diff(d, d2); diff != "" {
		t.Fatalf("permuting registered changed the decision (-first +permuted):\n%s", diff)
	}
	if errText(err) != errText(err2) {
		t.Fatalf("permuting registered changed the error: %v vs %v", err, err2)
	}
}

// TestPropertyAutoSelection: auto selection never picks an unregistered or
// unsupporting harness, falls back to openclaw only when no consistently
// registered harness supports the routes, and does not depend on the order
// of registered.
func TestPropertyAutoSelection(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		registered := rapid.SliceOfN(genManifest(), 0, 8).Draw(t, "registered")
		f := genFacts([]string{"", RuntimeDefault}).Draw(t, "facts")

		d, err := Select(nil, f, registered)
		if err != nil {
			t.Fatalf("auto selection failed: %v", err)
		}
		if d.Runtime != RuntimeAuto || d.RuntimeSource != SourceAuto {
			t.Fatalf("runtime %s from %s, want auto from auto", d.Runtime, d.RuntimeSource)
		}
		switch d.Reason {
		case ReasonAutoPlugin:
			if !someSupports(registered, d.HarnessID, f, true) {
				t.Fatalf("auto selected %q, which no registration supports for %+v", d.HarnessID, f.Routes)
			}
		case ReasonAutoOpenClaw:
			if d.HarnessID != RuntimeOpenClaw {
				t.Fatalf("auto_openclaw with harness %q", d.HarnessID)
			}
			for _, m := range registered {
				if agreed(registered, m.ID) && someSupports(registered, m.ID, f, true) {
					t.Fatalf("auto fell back to openclaw although %q supports the routes", m.ID)
				}
			}
		default:
			t.Fatalf("auto selection reason %q", d.Reason)
		}
		if len(d.Record.Candidates) > len(registered) {
			t.Fatalf("%d candidates for %d registrations", len(d.Record.Candidates), len(registered))
		}
		checkOrderIndependent(t, f, registered, d, err)
	})
}

// TestPropertyExplicitSelection: with any session pin, a selected plugin
// harness is registered and supports the routes, harness_not_registered
// means no registration has that id, and the order of registered does not
// matter.
func TestPropertyExplicitSelection(t *testing.T) {
	pins := append([]string{"", RuntimeDefault, RuntimeAuto, RuntimeOpenClaw, "ghost"}, propIDs...)
	rapid.Check(t, func(t *rapid.T) {
		registered := rapid.SliceOfN(genManifest(), 0, 8).Draw(t, "registered")
		f := genFacts(pins).Draw(t, "facts")

		d, err := Select(nil, f, registered)
		switch code := teamster.CodeOf(err); {
		case code == teamster.CodeHarnessNotRegistered:
			if slices.ContainsFunc(registered, func(m Manifest) bool { return m.ID == d.Runtime }) {
				t.Fatalf("%q reported not registered but is", d.Runtime)
			}
		case code == teamster.CodeHarnessUnsupportedRoute:
			if agreed(registered, d.Runtime) && someSupports(registered, d.Runtime, f, false) {
				t.Fatalf("%q reported unsupported but supports %+v", d.Runtime, f.Routes)
			}
		case err != nil:
			t.Fatalf("unexpected error %v", err)
		case d.Reason == ReasonForcedPlugin || d.Reason == ReasonAutoPlugin:
			if !someSupports(registered, d.HarnessID, f, d.Reason == ReasonAutoPlugin) {
				t.Fatalf("selected %q (%s), which no registration supports", d.HarnessID, d.Reason)
			}
			if d.Reason == ReasonForcedPlugin && d.HarnessID != d.Runtime {
				t.Fatalf("forced_plugin selected %q for runtime %q", d.HarnessID, d.Runtime)
			}
		default:
			if d.HarnessID != RuntimeOpenClaw {
				t.Fatalf("reason %s with harness %q, want openclaw", d.Reason, d.HarnessID)
			}
		}
		if err != nil && (d.HarnessID != "" || d.Record.SelectedHarnessID != "") {
			t.Fatalf("error %v with a selected harness %q", err, d.HarnessID)
		}
		checkOrderIndependent(t, f, registered, d, err)
	})
}
