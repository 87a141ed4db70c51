package codex

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster/selection"
)

func TestParseSettings(t *testing.T) {
	for _, raw := range []string{"", "null", "{}"} {
		s, err := parseSettings(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if s.MinVersion != defaultMinVersion || !strings.HasSuffix(s.Binary, localBinary) {
			t.Fatalf("%q: defaults %+v", raw, s)
		}
	}
	s, err := parseSettings(json.RawMessage(`{"binary":"/opt/codex","codexHome":"/var/codex","env":{"OPENAI_API_KEY":"sk-x"},
		"minVersion":"0.172.0","allowApprovals":true,"model":"gpt-5.6-sol","cwd":"/srv/work"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := settings{Binary: "/opt/codex", CodexHome: "/var/codex", Env: map[string]string{"OPENAI_API_KEY": "sk-x"},
		MinVersion: "0.172.0", AllowApprovals: true, Model: "gpt-5.6-sol", Cwd: "/srv/work"}
	if s.Binary != want.Binary || s.CodexHome != want.CodexHome || s.MinVersion != want.MinVersion || !s.AllowApprovals ||
		s.Model != want.Model || s.Cwd != want.Cwd || s.Env["OPENAI_API_KEY"] != "sk-x" {
		t.Fatalf("got %+v", s)
	}

	for raw, wantErr := range map[string]string{
		`{"binnary":"/x"}`:                       "unknown field",
		`{"minVersion":"soon"}`:                  "minVersion",
		`{"env":{"A=B":"x"}}`:                    "not a variable name",
		`{"env":{"KEY":"sec\u0000ret"}}`:         "env KEY contains a NUL byte",
		`{"codexHome":"relative/home"}`:          "codexHome",
		`{"cwd":"work"}`:                         "cwd",
		`{"allowApprovals":"yes"}`:               "cannot unmarshal",
		`["not","an","object"]`:                  "cannot unmarshal",
		`{"env":{"SECRET_KEY":"hunter2\u0000"}}`: "SECRET_KEY",
	} {
		_, err := parseSettings(json.RawMessage(raw))
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want %q", raw, err, wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the secret value: %v", raw, err)
		}
	}
}

// The app-server inherits only the basics of the worker's environment, plus
// CODEX_HOME and the settings' env; the worker's own settings stay out.
func TestEnviron(t *testing.T) {
	t.Setenv("TEAMSTER_REDIS_URL", "redis://:password@10.0.0.1:6379/0")
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("CODEX_HOME", "/from/the/worker")
	s := settings{CodexHome: "/from/settings", Env: map[string]string{"OPENAI_API_KEY": "sk-x", "PATH": "/opt/bin"}}
	env := s.environ()
	for _, want := range []string{"CODEX_HOME=/from/settings", "OPENAI_API_KEY=sk-x", "PATH=/opt/bin"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %v", want, env)
		}
	}
	for _, e := range env {
		if strings.HasPrefix(e, "TEAMSTER_") {
			t.Errorf("the worker's %s leaked into the app-server's env", e)
		}
	}
	if got := (&settings{}).environ(); !slices.Contains(got, "CODEX_HOME=/from/the/worker") {
		t.Errorf("without a codexHome setting the worker's CODEX_HOME is inherited: %v", got)
	}
	if keys := s.envKeys(); !slices.Equal(keys, []string{"OPENAI_API_KEY", "PATH"}) {
		t.Errorf("envKeys %v", keys)
	}
}

func TestDefaultBinaryWalksUp(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, localBinary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(deep)
	got, err := DefaultBinary()
	if err != nil || got != bin {
		t.Fatalf("DefaultBinary() = %q, %v; want %q", got, err, bin)
	}
}

// A missing binary fails the harness's construction, saying what to do.
func TestNewRefusesAMissingBinary(t *testing.T) {
	_, err := newHarness(selection.Manifest{ID: "codex"}, settings{Binary: filepath.Join(t.TempDir(), "codex")}, nil)
	if err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("error %v, want one telling to run make deps", err)
	}
}

func TestParseBinding(t *testing.T) {
	for raw, want := range map[string]string{"": "", "null": "", `{"threadId":"th-1"}`: "th-1"} {
		got, err := parseBinding(json.RawMessage(raw))
		if err != nil || got != want {
			t.Errorf("%q: %q, %v", raw, got, err)
		}
	}
	for _, raw := range []string{`{"thread":"scripted-s1","turns":2}`, `"th-1"`, `{`} {
		if _, err := parseBinding(json.RawMessage(raw)); err == nil {
			t.Errorf("%s accepted as a codex binding", raw)
		}
	}
	if got, _ := parseBinding(encodeBinding("th-9")); got != "th-9" {
		t.Fatalf("round trip: %q", got)
	}
}
