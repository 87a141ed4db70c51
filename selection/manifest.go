package selection

import (
	"fmt"
	"regexp"
)

// Manifest is the static description of one agent harness, as a worker
// advertises it in the registry (KV TEAMSTER_WORKERS) and as selection reads it.
// It mirrors OpenClaw's AgentHarness registration: the fields selection,
// delegation and injection need, and nothing secret.
type Manifest struct {
	ID                          string         `json:"id"`
	Label                       string         `json:"label,omitempty"`
	PluginID                    string         `json:"pluginId,omitempty"`
	AutoSelection               *AutoSelection `json:"autoSelection,omitempty"`
	Priority                    int            `json:"priority,omitempty"`
	DelegatedExecutionPluginIDs []string       `json:"delegatedExecutionPluginIds,omitempty"`
	// AuthBootstrap is "harness" when the harness owns its auth bootstrap, else "".
	AuthBootstrap string `json:"authBootstrap,omitempty"`
	// FallbackRuntime is "openclaw" when an explicit selection of this harness
	// for a route it does not support falls back to the embedded runtime.
	FallbackRuntime            string `json:"fallbackRuntime,omitempty"`
	ReproducesRequestOverrides bool   `json:"reproducesRequestOverrides,omitempty"`
	// Injection is the active-run injection the harness implements:
	// "none", "v1" or "v2" ("" reads as "none").
	Injection string `json:"injection,omitempty"`
	// Capabilities lists optional harness capabilities (for example "reset",
	// "runtimeArtifact"); informational.
	Capabilities []string `json:"capabilities,omitempty"`
}

// AutoSelection says which providers auto mode probes the harness for. A
// manifest without it is probed for every provider; an empty ProviderIDs list
// makes the harness explicit-only.
type AutoSelection struct {
	ProviderIDs []string `json:"providerIds"`
}

// Runtime ids that are not plugin harnesses.
const (
	RuntimeAuto     = "auto"
	RuntimeOpenClaw = "openclaw"
	RuntimeDefault  = "default"
)

// Injection levels.
const (
	InjectionNone = "none"
	InjectionV1   = "v1"
	InjectionV2   = "v2"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Validate checks a manifest as a worker config or registry entry must hold it.
func (m Manifest) Validate() error {
	if !idPattern.MatchString(m.ID) {
		return fmt.Errorf("harness id %q does not match %s", m.ID, idPattern)
	}
	if m.ID == RuntimeAuto || m.ID == RuntimeOpenClaw || m.ID == RuntimeDefault {
		return fmt.Errorf("harness id %q is reserved", m.ID)
	}
	if m.PluginID != "" && !idPattern.MatchString(m.PluginID) {
		return fmt.Errorf("harness %s: pluginId %q does not match %s", m.ID, m.PluginID, idPattern)
	}
	for _, d := range m.DelegatedExecutionPluginIDs {
		if !idPattern.MatchString(d) {
			return fmt.Errorf("harness %s: delegatedExecutionPluginIds entry %q does not match %s", m.ID, d, idPattern)
		}
	}
	switch m.AuthBootstrap {
	case "", "harness":
	default:
		return fmt.Errorf("harness %s: authBootstrap %q is not \"harness\" or absent", m.ID, m.AuthBootstrap)
	}
	switch m.FallbackRuntime {
	case "", RuntimeOpenClaw:
	default:
		return fmt.Errorf("harness %s: fallbackRuntime %q is not \"openclaw\" or absent", m.ID, m.FallbackRuntime)
	}
	switch m.Injection {
	case "", InjectionNone, InjectionV1, InjectionV2:
	default:
		return fmt.Errorf("harness %s: injection %q is not none, v1 or v2", m.ID, m.Injection)
	}
	return nil
}

// InjectionLevel returns the manifest's injection level, "none" when unset.
func (m Manifest) InjectionLevel() string {
	if m.Injection == "" {
		return InjectionNone
	}
	return m.Injection
}

// AllowsDelegate reports whether the manifest lists pluginID in
// delegatedExecutionPluginIds.
func (m Manifest) AllowsDelegate(pluginID string) bool {
	for _, d := range m.DelegatedExecutionPluginIDs {
		if d == pluginID {
			return true
		}
	}
	return false
}
