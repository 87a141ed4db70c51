package harness

import (
	"fmt"
	"strings"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// A runtime artifact ({id, fingerprint}) says which exact native runtime ran
// an attempt (OpenClaw's verified runtime artifacts). An attempt with
// captureRuntimeArtifact asks the harness to return the artifact of the
// runtime it used; an attempt with expectedRuntimeArtifact (a verified
// continuation) must run on exactly that runtime, and fails with
// runtime_artifact_mismatch before any native thread is started or resumed
// when the worker's runtime is another. Ordinary turns carry neither, so
// identifying the runtime stays off the hot path.
//
// Ids and fingerprints are identities, not secrets: error messages name them.

// CheckExpectedArtifact compares the attempt's expected artifact with the
// worker's actual one: nil when expected is nil or equal to actual, else a
// runtime_artifact_mismatch error naming what differs (id, fingerprint, or
// that the worker's runtime has no artifact identity). It only compares; see
// VerifyRuntimeArtifact for the check harnesses run before a native start.
func CheckExpectedArtifact(expected *bus.RuntimeArtifact, actual bus.RuntimeArtifact) error {
	if expected == nil || *expected == actual {
		return nil
	}
	if actual.ID == "" || actual.Fingerprint == "" {
		return teamster.Errorf(teamster.CodeRuntimeArtifactMismatch,
			"the attempt expects runtime artifact %.80q but the worker's runtime has no artifact identity", expected.ID)
	}
	var diffs []string
	if expected.ID != actual.ID {
		diffs = append(diffs, "id (expected "+quoteID(expected.ID)+", the worker has "+quoteID(actual.ID)+")")
	}
	if expected.Fingerprint != actual.Fingerprint {
		diffs = append(diffs, "fingerprint (expected "+quoteID(expected.Fingerprint)+", the worker has "+quoteID(actual.Fingerprint)+")")
	}
	return teamster.Errorf(teamster.CodeRuntimeArtifactMismatch,
		"the worker's runtime artifact differs from the expected one in %s", strings.Join(diffs, " and "))
}

// VerifyRuntimeArtifact is the artifact check a harness runs after it
// acquired its native runtime (process, binary, server) and before it starts
// or resumes any native thread, with actual the artifact of exactly that
// runtime. It returns the artifact to report as Outcome.RuntimeArtifact
// (nil unless the attempt asked to capture it) and an error that the harness
// must return at once, starting nothing:
//   - runtime_artifact_mismatch when the attempt's expectedRuntimeArtifact
//     differs from actual (CheckExpectedArtifact);
//   - harness_failed when the attempt asks to capture the artifact and
//     actual lacks an id or fingerprint.
//
// Both errors carry sideEffects none: nothing has run yet.
func VerifyRuntimeArtifact(a *bus.Attempt, actual bus.RuntimeArtifact) (*bus.RuntimeArtifact, error) {
	if a == nil {
		return nil, nil
	}
	if err := CheckExpectedArtifact(a.ExpectedRuntimeArtifact, actual); err != nil {
		return nil, teamster.AsError(err).WithSideEffects(teamster.SideEffectsNone)
	}
	if !a.CaptureRuntimeArtifact {
		return nil, nil
	}
	if actual.ID == "" || actual.Fingerprint == "" {
		return nil, teamster.Errorf(teamster.CodeHarnessFailed,
			"the attempt asks to capture the runtime artifact but the harness's runtime has no id and fingerprint").
			WithSideEffects(teamster.SideEffectsNone)
	}
	captured := actual
	return &captured, nil
}

// quoteID quotes an artifact id or fingerprint for a message, cut to 80
// characters.
func quoteID(s string) string {
	return fmt.Sprintf("%.80q", s)
}
