package harness_test

import (
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness"
)

func TestCheckHostOwnedMedia(t *testing.T) {
	const (
		a      = "https://media.example/a.png"
		b      = "https://media.example/b.mp3"
		signed = "https://media.example/c.png?token=SECRET"
	)
	cases := []struct {
		name      string
		tool      []string
		hostOwned []string
		ok        bool
		index     string
	}{
		{"none", nil, nil, true, ""},
		{"none host-owned", []string{a, b}, nil, true, ""},
		{"subset", []string{a, b}, []string{b}, true, ""},
		{"equal", []string{a, b}, []string{a, b}, true, ""},
		{"repeated", []string{a}, []string{a, a}, true, ""},
		{"no tool media", nil, []string{a}, false, "[0]"},
		{"not presented", []string{a}, []string{a, signed}, false, "[1]"},
		{"exact match only", []string{a}, []string{a + "/"}, false, "[0]"},
		{"empty entry", []string{a}, []string{""}, false, "[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{
				harness.CheckHostOwnedMedia(tc.tool, tc.hostOwned),
				(&harness.Outcome{ToolMediaURLs: tc.tool, HostOwnedToolMediaURLs: tc.hostOwned}).CheckToolMedia(),
			} {
				if tc.ok {
					if err != nil {
						t.Fatalf("error %v, want nil", err)
					}
					continue
				}
				wantCode(t, "CheckHostOwnedMedia", err, teamster.CodeHarnessFailed)
				msg := err.Error()
				if !strings.Contains(msg, "hostOwnedToolMediaUrls"+tc.index) {
					t.Fatalf("message %q does not name entry %s", msg, tc.index)
				}
				if strings.Contains(msg, "SECRET") || strings.Contains(msg, "media.example") {
					t.Fatalf("message %q leaks a media URL", msg)
				}
			}
		})
	}
}
