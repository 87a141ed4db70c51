package codex

// Test hooks for the external tests (package codex_test).

// SetTrace makes h report every protocol message it sends or receives (its
// direction and method) to f. Set it before the first turn.
func SetTrace(h *Harness, f func(dir, method string)) {
	h.mu.Lock()
	h.trace = f
	h.mu.Unlock()
}

// PID is the pid of h's running app-server, 0 when none runs.
func PID(h *Harness) int {
	if p := h.sup.current(); p != nil {
		return p.pid
	}
	return 0
}
