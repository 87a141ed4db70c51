package codex

import (
	"fmt"
	"strconv"
	"strings"
)

// version is a codex release version: major.minor.patch with an optional
// pre-release suffix (0.172.0-alpha.3), which sorts before the release.
type version struct {
	nums [3]int
	pre  string
	text string
}

// parseVersion reads "1.2.3", "1.2.3-alpha.1" (build metadata after "+" is
// ignored); missing minor or patch parts read as 0.
func parseVersion(s string) (version, error) {
	v := version{text: s}
	core, _, _ := strings.Cut(s, "+")
	core, v.pre, _ = strings.Cut(core, "-")
	parts := strings.Split(core, ".")
	if core == "" || len(parts) > 3 {
		return version{}, fmt.Errorf("%q is not a version (major.minor.patch)", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return version{}, fmt.Errorf("%q is not a version (major.minor.patch)", s)
		}
		v.nums[i] = n
	}
	return v, nil
}

func (v version) String() string { return v.text }

// less reports whether v sorts before w. Pre-releases sort before their
// release; two pre-releases of one release compare as strings.
func (v version) less(w version) bool {
	for i := range v.nums {
		if v.nums[i] != w.nums[i] {
			return v.nums[i] < w.nums[i]
		}
	}
	switch {
	case v.pre == w.pre:
		return false
	case v.pre == "":
		return false
	case w.pre == "":
		return true
	default:
		return v.pre < w.pre
	}
}

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
	if got.less(want) {
		return got, fmt.Errorf("the codex app-server is version %s, older than the minimum version %s (harness setting minVersion)", got, want)
	}
	return got, nil
}
