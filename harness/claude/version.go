package claude

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// versionTimeout bounds `claude --version`.
const versionTimeout = 30 * time.Second

// version is a Claude Code release version: major.minor.patch with an
// optional pre-release suffix, which sorts before the release.
type version = nativecli.Version

// parseVersion reads "2.1.328", "2.2.0-beta.1" (build metadata after "+" is
// ignored); missing minor or patch parts read as 0.
func parseVersion(s string) (version, error) { return nativecli.ParseVersion(s) }

// versionOutput reads the first word of `claude --version`, which prints
// "2.1.328 (Claude Code)".
func versionOutput(out string) (version, error) {
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return version{}, fmt.Errorf("`claude --version` printed nothing")
	}
	v, err := parseVersion(fields[0])
	if err != nil {
		return version{}, fmt.Errorf("`claude --version` printed %.80q, which names no version", strings.TrimSpace(out))
	}
	return v, nil
}

// checkVersion refuses a CLI older than min.
func checkVersion(got version, min string) error {
	want, err := parseVersion(min)
	if err != nil {
		return fmt.Errorf("minimum version: %w", err)
	}
	if got.Less(want) {
		return fmt.Errorf("the claude CLI is version %s, older than the minimum version %s (harness setting minVersion)", got, want)
	}
	return nil
}

// probeVersion runs `claude --version` with the harness's environment (no
// key) and returns the version it printed.
func probeVersion(ctx context.Context, s *settings, home string) (version, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Binary, "--version")
	cmd.Env = s.environ(home, credentials{})
	cmd.Dir = home
	out, err := cmd.Output()
	if err != nil {
		return version{}, fmt.Errorf("`%s --version`: %w", s.Binary, err)
	}
	return versionOutput(string(out))
}
