package codextest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/teamster-fleet/teamster/harness/codex"
)

// KeyEnv is the variable that holds the test provider's API key (its
// env_key); pass it in the harness settings' env.
const KeyEnv = "TEAMSTER_TEST_MODEL_KEY"

// Model is the model the test CODEX_HOME configures.
const Model = "gpt-test"

// Binary returns the installed codex binary (the harness's default, the
// project-local install), failing the test with what to do when it is not
// installed. Tests of the codex harness never skip for want of it.
func Binary(t testing.TB) string {
	t.Helper()
	b, err := codex.DefaultBinary()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(b); err != nil || st.IsDir() {
		t.Fatalf("the codex binary is not installed at %s: run `make deps` (it runs harness/codex/install.sh, which installs @openai/codex %s)", b, codex.PinnedVersion)
	}
	return b
}

// NewHome writes a CODEX_HOME in a temp dir whose config.toml sends every
// model request to e (wire_api "responses", API key from KeyEnv, no
// retries, analytics off) and returns its path.
func NewHome(t testing.TB, e *Endpoint) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`model_provider = "teamster-test"
model = %q

[model_providers.teamster-test]
name = "teamster test endpoint"
base_url = %q
wire_api = "responses"
env_key = %q
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`, Model, e.BaseURL(), KeyEnv)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Rollouts are the thread rollout files under a CODEX_HOME: one per thread
// the app-server started there.
func Rollouts(t testing.TB, home string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(home, "sessions"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return err
		}
		if !d.IsDir() && filepath.Ext(p) == ".jsonl" {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}
