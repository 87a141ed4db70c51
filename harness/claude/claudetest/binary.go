package claudetest

import (
	"os"
	"testing"

	"github.com/teamster-fleet/teamster/harness/claude"
)

// KeyEnv is the worker variable that holds the test endpoint's API key;
// name it in the harness settings' apiKeyEnv (or an auth profile's).
const KeyEnv = "TEAMSTER_TEST_ANTHROPIC_KEY"

// Binary returns the installed claude binary (the harness's default, the
// project-local install), failing the test with what to do when it is not
// installed. Tests of the claude harness never skip for want of it.
func Binary(t testing.TB) string {
	t.Helper()
	b, err := claude.DefaultBinary()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(b); err != nil || st.IsDir() {
		t.Fatalf("the claude binary is not installed at %s: run `make deps` (it runs harness/claude/install.sh, which installs @anthropic-ai/claude-code %s)", b, claude.PinnedVersion)
	}
	return b
}
