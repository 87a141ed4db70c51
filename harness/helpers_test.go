package harness_test

import (
	"errors"
	"testing"

	"github.com/teamster-fleet/teamster"
)

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
