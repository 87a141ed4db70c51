package harness_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
)

var worker = bus.RuntimeArtifact{ID: "codex-cli", Fingerprint: "sha256:aaa"}

func TestCheckExpectedArtifact(t *testing.T) {
	cases := []struct {
		name     string
		expected *bus.RuntimeArtifact
		actual   bus.RuntimeArtifact
		ok       bool
		mentions []string // in the message
		omits    []string // not in the message
	}{
		{"nothing expected", nil, worker, true, nil, nil},
		{"nothing expected, no identity", nil, bus.RuntimeArtifact{}, true, nil, nil},
		{"equal", &bus.RuntimeArtifact{ID: "codex-cli", Fingerprint: "sha256:aaa"}, worker, true, nil, nil},
		{"id differs", &bus.RuntimeArtifact{ID: "claude-cli", Fingerprint: "sha256:aaa"}, worker, false,
			[]string{"id", `"claude-cli"`, `"codex-cli"`}, []string{"fingerprint"}},
		{"fingerprint differs", &bus.RuntimeArtifact{ID: "codex-cli", Fingerprint: "sha256:bbb"}, worker, false,
			[]string{"fingerprint", `"sha256:bbb"`, `"sha256:aaa"`}, []string{"id ("}},
		{"both differ", &bus.RuntimeArtifact{ID: "claude-cli", Fingerprint: "sha256:bbb"}, worker, false,
			[]string{"id (", "fingerprint (", " and "}, nil},
		{"no identity on the worker", &bus.RuntimeArtifact{ID: "codex-cli", Fingerprint: "sha256:aaa"}, bus.RuntimeArtifact{ID: "codex-cli"}, false,
			[]string{"no artifact identity", `"codex-cli"`}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := harness.CheckExpectedArtifact(tc.expected, tc.actual)
			if tc.ok {
				if err != nil {
					t.Fatalf("CheckExpectedArtifact = %v, want nil", err)
				}
				return
			}
			wantCode(t, "CheckExpectedArtifact", err, teamster.CodeRuntimeArtifactMismatch)
			if !errors.Is(err, teamster.ErrRuntimeArtifactMismatch) {
				t.Fatalf("errors.Is(%v, ErrRuntimeArtifactMismatch) is false", err)
			}
			msg := err.Error()
			for _, s := range tc.mentions {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not mention %q", msg, s)
				}
			}
			for _, s := range tc.omits {
				if strings.Contains(msg, s) {
					t.Errorf("message %q mentions %q", msg, s)
				}
			}
		})
	}
}

func TestCheckExpectedArtifactBoundsMessage(t *testing.T) {
	long := strings.Repeat("x", 10000)
	err := harness.CheckExpectedArtifact(&bus.RuntimeArtifact{ID: long, Fingerprint: long}, worker)
	if n := len(err.Error()); n > 400 {
		t.Fatalf("message of %d bytes for long ids", n)
	}
}

func TestVerifyRuntimeArtifact(t *testing.T) {
	other := &bus.RuntimeArtifact{ID: "codex-cli", Fingerprint: "sha256:old"}
	same := worker
	cases := []struct {
		name    string
		attempt *bus.Attempt
		actual  bus.RuntimeArtifact
		want    *bus.RuntimeArtifact
		code    teamster.Code
	}{
		{"no attempt", nil, worker, nil, ""},
		{"ordinary turn", &bus.Attempt{}, bus.RuntimeArtifact{}, nil, ""},
		{"capture", &bus.Attempt{CaptureRuntimeArtifact: true}, worker, &same, ""},
		{"capture without identity", &bus.Attempt{CaptureRuntimeArtifact: true}, bus.RuntimeArtifact{ID: "codex-cli"}, nil, teamster.CodeHarnessFailed},
		{"expected matches", &bus.Attempt{ExpectedRuntimeArtifact: &same}, worker, nil, ""},
		{"expected matches, capture", &bus.Attempt{ExpectedRuntimeArtifact: &same, CaptureRuntimeArtifact: true}, worker, &same, ""},
		{"expected differs", &bus.Attempt{ExpectedRuntimeArtifact: other}, worker, nil, teamster.CodeRuntimeArtifactMismatch},
		{"expected differs, capture", &bus.Attempt{ExpectedRuntimeArtifact: other, CaptureRuntimeArtifact: true}, worker, nil, teamster.CodeRuntimeArtifactMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := harness.VerifyRuntimeArtifact(tc.attempt, tc.actual)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("artifact (-want +got):\n%s", diff)
			}
			if tc.code == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			wantCode(t, "VerifyRuntimeArtifact", err, tc.code)
			if se := teamster.AsError(err).SideEffects; se != teamster.SideEffectsNone {
				t.Fatalf("sideEffects %q, want none: nothing started", se)
			}
		})
	}
}
