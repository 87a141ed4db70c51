package codex

import (
	"fmt"
	"strings"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// version is a codex release version: major.minor.patch with an optional
// pre-release suffix (0.172.0-alpha.3), which sorts before the release.
type version = nativecli.Version

// parseVersion reads "1.2.3", "1.2.3-alpha.1" (build metadata after "+" is
// ignored); missing minor or patch parts read as 0.
func parseVersion(s string) (version, error) { return nativecli.ParseVersion(s) }

// userAgentVersion extracts the app-server's version from the userAgent of
// its initialize answer, "<clientName>/<version> (<os>; <arch>) ...".
func userAgentVersion(ua string) (version, error) {
	_, rest, ok := strings.Cut(ua, "/")
	if !ok {
		return version{}, fmt.Errorf("the app-server's userAgent %.80q names no version", ua)
	}
	text, _, _ := strings.Cut(rest, " ")
	v, err := parseVersion(text)
	if err != nil {
		return version{}, fmt.Errorf("the app-server's userAgent %.80q names no version: %w", ua, err)
	}
	return v, nil
}

// checkVersion refuses an app-server older than min, or one that did not say
// which version it is.
func checkVersion(userAgent, min string) (version, error) {
	want, err := parseVersion(min)
	if err != nil {
		return version{}, fmt.Errorf("minimum version: %w", err)
	}
	got, err := userAgentVersion(userAgent)
	if err != nil {
		return version{}, fmt.Errorf("%w; the minimum version is %s", err, want)
	}
	if got.Less(want) {
		return got, fmt.Errorf("the codex app-server is version %s, older than the minimum version %s (harness setting minVersion)", got, want)
	}
	return got, nil
}
