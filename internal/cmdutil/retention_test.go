package cmdutil

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestAddRetention(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		args      []string
		want      time.Duration
		err       string // part of the error; "" for none
	}{
		{name: "unset is the default", want: 0},
		{name: "flag", args: []string{"--attempt-retention", "2h"}, want: 2 * time.Hour},
		{name: "env", env: "90m", want: 90 * time.Minute},
		{name: "flag over env", env: "90m", args: []string{"--attempt-retention=1h"}, want: time.Hour},
		{name: "below the minimum", args: []string{"--attempt-retention", "5m"}, err: "outside 10m0s..24h0m0s"},
		{name: "above the results stream's age", env: "48h", err: "outside 10m0s..24h0m0s"},
		{name: "not a duration", args: []string{"--attempt-retention", "2x"}, err: `--attempt-retention "2x" (env TEAMSTER_ATTEMPT_RETENTION)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvRetention, tc.env)
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			get := AddRetention(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := get()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v, want %s", err, tc.want)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case got != tc.want:
				t.Fatalf("retention %s, want %s", got, tc.want)
			}
		})
	}
}
