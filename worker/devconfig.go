package worker

import (
	"encoding/json"

	"github.com/teamster-fleet/teamster/selection"
)

// DevConfig is the sample fleet of `teamster dev` and the tests: the scripted
// harness hosted under the ids of docs/PROTOCOL.md's sample config, "codex" (V2
// injection, auto-selected for openai routes that declare it, voice-call may
// continue its sessions) and "claude-cli" (V1, for anthropic).
func DevConfig(workerID string, slots int) *Config {
	c := &Config{
		WorkerID: workerID,
		Slots:    slots,
		Harnesses: []HarnessConfig{
			{Implementation: "scripted", Manifest: selection.Manifest{
				ID: "codex", Label: "Codex", PluginID: "codex",
				AutoSelection: &selection.AutoSelection{ProviderIDs: []string{"openai"}}, Priority: 100,
				DelegatedExecutionPluginIDs: []string{"voice-call"}, Injection: selection.InjectionV2,
			}},
			{Implementation: "scripted", Manifest: selection.Manifest{
				ID: "claude-cli", Label: "Claude CLI", PluginID: "anthropic",
				AutoSelection: &selection.AutoSelection{ProviderIDs: []string{"anthropic"}}, Injection: selection.InjectionV1,
			}},
		},
	}
	c.applyDefaults()
	return c
}

// WithScriptedWorkspace gives every scripted harness of c the workspace dir
// (their write steps write there; reply attachments are read from there)
// and returns c.
func (c *Config) WithScriptedWorkspace(dir string) *Config {
	settings, _ := json.Marshal(map[string]string{"workspace": dir})
	for i := range c.Harnesses {
		if c.Harnesses[i].Implementation == "scripted" {
			c.Harnesses[i].Settings = settings
		}
	}
	return c
}
