package nativecli

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a CLI release version: major.minor.patch with an optional
// pre-release suffix (0.172.0-alpha.3), which sorts before the release.
type Version struct {
	nums [3]int
	pre  string
	text string
}

// ParseVersion reads "1.2.3", "1.2.3-alpha.1" (build metadata after "+" is
// ignored); missing minor or patch parts read as 0.
func ParseVersion(s string) (Version, error) {
	v := Version{text: s}
	core, _, _ := strings.Cut(s, "+")
	core, v.pre, _ = strings.Cut(core, "-")
	parts := strings.Split(core, ".")
	if core == "" || len(parts) > 3 {
		return Version{}, fmt.Errorf("%q is not a version (major.minor.patch)", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Version{}, fmt.Errorf("%q is not a version (major.minor.patch)", s)
		}
		v.nums[i] = n
	}
	return v, nil
}

// String is the version as it was read.
func (v Version) String() string { return v.text }

// Less reports whether v sorts before w. Pre-releases sort before their
// release; two pre-releases of one release compare as strings.
func (v Version) Less(w Version) bool {
	for i := range v.nums {
		if v.nums[i] != w.nums[i] {
			return v.nums[i] < w.nums[i]
		}
	}
	switch {
	case v.pre == w.pre, v.pre == "":
		return false
	case w.pre == "":
		return true
	default:
		return v.pre < w.pre
	}
}
