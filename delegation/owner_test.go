package delegation

import (
	"errors"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster"
)

func TestOwnerOnly(t *testing.T) {
	ops := []string{"create", "patch", "reset", "delete", "archive"}
	for _, op := range ops {
		if err := OwnerOnly("", op); err != nil {
			t.Errorf("owner %s: %v, want nil", op, err)
		}
		err := OwnerOnly(fxDelegate, op)
		if !errors.Is(err, teamster.ErrOwnerOnly) {
			t.Errorf("delegate %s: %v, want owner_only", op, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, op) || strings.Contains(msg, fxDelegate) {
			t.Errorf("delegate %s: message %q should name the op and not the delegate", op, msg)
		}
	}
}

// TestOwnerOnlyUnknownOp: the whole namespace is owner-only; an op outside
// the five is refused to a delegate too, and its value is not echoed.
func TestOwnerOnlyUnknownOp(t *testing.T) {
	for _, op := range []string{"", "rename", "CREATE", "agent:main:voice:+15550100"} {
		err := OwnerOnly(fxDelegate, op)
		if !errors.Is(err, teamster.ErrOwnerOnly) {
			t.Errorf("op %q: %v, want owner_only", op, err)
			continue
		}
		if op != "" && strings.Contains(err.Error(), op) {
			t.Errorf("op %q: message %q echoes the op", op, err.Error())
		}
		if err := OwnerOnly("", op); err != nil {
			t.Errorf("owner, op %q: %v, want nil (validating op is the caller's business)", op, err)
		}
	}
}
