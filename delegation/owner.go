package delegation

import "github.com/teamster-fleet/teamster"

// OwnerOnly refuses a session operation (teamster.session.<op>: create,
// patch, reset, delete, archive) to a delegate. delegate is the caller's
// delegate plugin id, "" for an owner. It returns nil for an owner and an
// owner_only *teamster.Error for any delegate, whatever op is: the whole
// teamster.session.* namespace is owner-only, so an unknown op is refused too
// (validating op is the caller's business). The message names op only when it
// is one of the five known ops, and never names the delegate.
func OwnerOnly(delegate, op string) error {
	if delegate == "" {
		return nil
	}
	switch op {
	case "create", "patch", "reset", "delete", "archive":
		return teamster.Errorf(teamster.CodeOwnerOnly, "session %s is owner-only: delegates get work admission and execution only", op)
	}
	return teamster.Errorf(teamster.CodeOwnerOnly, "session operations are owner-only: delegates get work admission and execution only")
}
