package codex

import "github.com/teamster-fleet/teamster/selection"

// Test hooks for the external tests (package codex_test).

// Harness is the codex harness (what Factory returns) and Settings its
// settings.
type (
	Harness  = codexHarness
	Settings = settings
)

// New is newHarness without a logger.
func New(m selection.Manifest, s Settings) (*Harness, error) {
	return newHarness(m, s, nil)
}

// SetTrace makes h report every protocol message it sends or receives (its
// direction and method) to f. Set it before the first turn.
func SetTrace(h *Harness, f func(dir, method string)) {
	h.mu.Lock()
	h.trace = f
	h.mu.Unlock()
}

// PID is the pid of h's running app-server, 0 when none runs. It reads the
// supervisor's ready process without starting anything.
func PID(h *Harness) int {
	h.sup.mu.Lock()
	p := h.sup.cur
	h.sup.mu.Unlock()
	if p != nil {
		return p.pid
	}
	return 0
}
