package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/selection"
)

// The scripted implementation takes one setting, an absolute workspace,
// which its harness then reports; anything else is refused.
func TestScriptedSettings(t *testing.T) {
	f, _ := implementation("scripted")
	m := selection.Manifest{ID: "codex", PluginID: "codex"}
	h, err := f(m, json.RawMessage(`{"workspace":"/var/lib/teamster/ws"}`), FactoryEnv{})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.(harness.Workspacer).Workspace(nil); got != "/var/lib/teamster/ws" {
		t.Fatalf("workspace %q", got)
	}
	for _, s := range []string{`null`, `{}`} {
		if _, err := f(m, json.RawMessage(s), FactoryEnv{}); err != nil {
			t.Errorf("settings %s: %v", s, err)
		}
	}
	for s, want := range map[string]string{
		`{"workspace":"ws"}`: "not an absolute path",
		`{"other":1}`:        "it takes only workspace",
		`{"workspace":3}`:    "it takes only workspace",
	} {
		if _, err := f(m, json.RawMessage(s), FactoryEnv{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("settings %s: %v, want an error naming %q", s, err, want)
		}
	}
	c := DevConfig("w1", 4).WithScriptedWorkspace("/tmp/ws")
	for _, hc := range c.Harnesses {
		if string(hc.Settings) != `{"workspace":"/tmp/ws"}` {
			t.Errorf("%s: settings %s", hc.ID, hc.Settings)
		}
	}
}
