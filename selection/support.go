package selection

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Supports reports whether the harness described by m can run an attempt
// over the prepared routes, and why not when it cannot. It holds when there
// is at least one route and, for every route, the route declares a
// runtimePolicy whose compatibleIds lists m.ID, and the route has no request
// transport overrides unless m reproduces them. With several routes this is
// membership in the intersection of their compatible ids. PreparedAuth never
// implies support, and neither does the provider or the model id.
//
// Workers call it again under the lease; selection calls it for every
// candidate.
func Supports(m Manifest, routes []Route) (bool, string) {
	if len(routes) == 0 {
		return false, "no prepared route"
	}
	for i := range routes {
		why := routeSupport(m, &routes[i])
		if why == "" {
			continue
		}
		if len(routes) > 1 {
			why = fmt.Sprintf("route %d of %d: %s", i+1, len(routes), why)
		}
		return false, why
	}
	return true, ""
}

// routeSupport returns why m cannot run over r, "" when it can.
func routeSupport(m Manifest, r *Route) string {
	if r.RuntimePolicy == nil {
		return "route declares no runtimePolicy"
	}
	if !slices.Contains(r.RuntimePolicy.CompatibleIDs, m.ID) {
		return "runtimePolicy.compatibleIds does not list " + m.ID
	}
	switch r.RequestTransportOverrides {
	case "", OverridesNone:
	case OverridesPresent:
		if !m.ReproducesRequestOverrides {
			return "requestTransportOverrides present and harness does not reproduce them"
		}
	default:
		if !m.ReproducesRequestOverrides {
			return "requestTransportOverrides " + strconv.Quote(r.RequestTransportOverrides) +
				" treated as present and harness does not reproduce them"
		}
	}
	return ""
}

// probed reports whether auto mode asks m about provider (already
// normalized), and why not when it does not.
func probed(m Manifest, provider string) (bool, string) {
	if m.AutoSelection == nil {
		return true, ""
	}
	if len(m.AutoSelection.ProviderIDs) == 0 {
		return false, "autoSelection.providerIds is empty (explicit-only)"
	}
	for _, id := range m.AutoSelection.ProviderIDs {
		if normalizeID(id) == provider {
			return true, ""
		}
	}
	return false, "provider " + provider + " not in autoSelection.providerIds"
}

// harnessSet returns the valid registered manifests, one per id, in probe
// order (priority descending, then id ascending), with notes about skipped
// and conflicting entries. The result does not depend on the order of
// registered.
func harnessSet(registered []Manifest) ([]Manifest, []string) {
	valid := make([]Manifest, 0, len(registered))
	var notes []string
	for _, m := range registered {
		if err := m.Validate(); err != nil {
			notes = append(notes, "registered harness ignored: "+err.Error())
			continue
		}
		valid = append(valid, m)
	}
	if len(notes) > 1 {
		slices.Sort(notes)
		notes = slices.Compact(notes)
	}
	slices.SortFunc(valid, compareManifests)
	out := valid[:0]
	conflict := ""
	for _, m := range valid {
		if n := len(out); n > 0 && out[n-1].ID == m.ID {
			if compareManifests(out[n-1], m) != 0 && conflict != m.ID {
				conflict = m.ID
				notes = append(notes, "harness "+m.ID+" is registered with differing manifests; "+
					"using the first in canonical order")
			}
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Manifest) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, notes
}

// compareManifests orders manifests by id, then by every other field, so
// that the choice among differing duplicates is fixed.
func compareManifests(a, b Manifest) int {
	return cmp.Or(
		cmp.Compare(a.ID, b.ID),
		cmp.Compare(a.Label, b.Label),
		cmp.Compare(a.PluginID, b.PluginID),
		cmp.Compare(a.Priority, b.Priority),
		compareAutoSelection(a.AutoSelection, b.AutoSelection),
		slices.Compare(a.DelegatedExecutionPluginIDs, b.DelegatedExecutionPluginIDs),
		cmp.Compare(a.AuthBootstrap, b.AuthBootstrap),
		cmp.Compare(a.FallbackRuntime, b.FallbackRuntime),
		compareBool(a.ReproducesRequestOverrides, b.ReproducesRequestOverrides),
		cmp.Compare(a.InjectionLevel(), b.InjectionLevel()),
		slices.Compare(a.Capabilities, b.Capabilities),
	)
}

// compareAutoSelection orders an absent autoSelection before any present one.
func compareAutoSelection(a, b *AutoSelection) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	default:
		return slices.Compare(a.ProviderIDs, b.ProviderIDs)
	}
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}
