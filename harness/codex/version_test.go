package codex

import (
	"strings"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	ua := func(v string) string { return "teamster/" + v + " (Debian 12.0.0; x86_64) xterm (teamster; 1)" }
	for _, tc := range []struct {
		name, userAgent, min string
		wantErr              string // "" for accepted
	}{
		{"equal", ua("0.171.0"), "0.171.0", ""},
		{"newer patch", ua("0.171.1"), "0.171.0", ""},
		{"newer minor", ua("0.172.0"), "0.171.0", ""},
		{"newer major", ua("1.0.0"), "0.171.0", ""},
		{"numeric, not lexical", ua("0.1000.0"), "0.999.0", ""},
		{"older", ua("0.170.9"), "0.171.0", "version 0.170.9, older than the minimum version 0.171.0"},
		{"far above", ua("0.171.0"), "99.0.0", "older than the minimum version 99.0.0"},
		{"pre-release of the minimum is older", ua("0.171.0-alpha.2"), "0.171.0", "older than the minimum"},
		{"pre-release of a later release", ua("0.172.0-alpha.1"), "0.171.0", ""},
		{"short minimum", ua("0.171.0"), "0.171", ""},
		{"build metadata ignored", ua("0.171.0+abc"), "0.171.0", ""},
		{"no version", "teamster (Debian)", "0.171.0", "names no version"},
		{"empty", "", "0.171.0", "names no version"},
		{"garbage version", ua("latest"), "0.171.0", "names no version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkVersion(tc.userAgent, tc.min)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseVersionRefusesNonsense(t *testing.T) {
	for _, s := range []string{"", "x", "1.2.3.4", "1..2", "-1.0.0", "1.a.0"} {
		if _, err := parseVersion(s); err == nil {
			t.Errorf("parseVersion(%q) accepted", s)
		}
	}
}
