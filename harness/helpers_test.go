package harness_test

import (
	"errors"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
)

// waitBound bounds every wait for an event that must happen; it is a guard
// against a hung test, never a timing assertion.
const waitBound = 10 * time.Second

// waitClosed fails the test unless ch closes within waitBound.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitBound):
		t.Fatalf("%s: not done", what)
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// wantCode fails the test unless err is a *teamster.Error with code.
func wantCode(t *testing.T, what string, err error, code teamster.Code) {
	t.Helper()
	var te *teamster.Error
	if !errors.As(err, &te) || te == nil {
		t.Fatalf("%s: error %v (%T) is not a *teamster.Error with code %s", what, err, err, code)
	}
	if te.Code != code {
		t.Fatalf("%s: code %s (%v), want %s", what, te.Code, err, code)
	}
}
