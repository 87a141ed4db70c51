package claude

import (
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/selection"
)

// Test hooks for the external tests (package claude_test).

// Harness is the claude harness (what Factory returns) and Settings its
// settings.
type (
	Harness     = claudeHarness
	Settings    = settings
	AuthProfile = authProfile
)

// New is newHarness.
func New(m selection.Manifest, s Settings, log logrus.FieldLogger) (*Harness, error) {
	return newHarness(m, s, log)
}

// OnStart makes h report the pid of every CLI process it starts.
func OnStart(h *Harness, f func(attemptID string, pid int)) {
	h.hmu.Lock()
	h.started = f
	h.hmu.Unlock()
}

// Home is h's HOME for the CLI.
func Home(h *Harness) string { return h.home }

// ParseSettings is parseSettings.
func ParseSettings(raw []byte) (Settings, error) { return parseSettings(raw) }
