package nativecli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// DecodeSettings decodes a harness entry's raw settings into v; absent, null
// and {} leave v as it is. Unknown keys are errors, as everywhere in a worker
// config; what (e.g. "codex settings") starts the error message.
func DecodeSettings(raw json.RawMessage, v any, what string) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// FindBinary is a project-local install: rel (e.g. .tools/codex/bin/codex)
// in the working directory or the nearest parent directory that has one.
// When there is none, it returns where the install script would put it
// (under the nearest directory with a go.mod, else the working directory),
// so that the error names that path. what (e.g. "codex settings") starts the
// error message.
func FindBinary(rel, what string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("%s: default binary: %w", what, err)
	}
	root := ""
	for dir := wd; ; {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && root == "" {
			root = dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if root == "" {
		root = wd
	}
	return filepath.Join(root, rel), nil
}

// CheckBinary reports a missing or unusable binary with what to do about
// it. name is the binary's kind ("codex"); install says what installs it
// ("harness/codex/install.sh installs @openai/codex 0.171.0").
func CheckBinary(path, name, install string) error {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("%s binary %s not found (%v): run `make deps` (%s) or set the harness setting \"binary\"", name, path, errors.Unwrap(err), install)
	case st.IsDir():
		return fmt.Errorf("%s binary %s is a directory", name, path)
	case runtime.GOOS != "windows" && st.Mode()&0o111 == 0:
		return fmt.Errorf("%s binary %s is not executable", name, path)
	}
	return nil
}

// ValidEnvName reports whether k can name an environment variable.
func ValidEnvName(k string) bool {
	return k != "" && !strings.ContainsAny(k, "=\x00")
}

// Inherit returns the variables named by keys that the worker's environment
// sets: what a CLI process inherits. Everything else (the worker's own
// settings and credentials) stays out of a process that runs model-chosen
// commands.
func Inherit(keys []string) map[string]string {
	env := map[string]string{}
	for _, k := range keys {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	return env
}

// Environ is env as a process environment: "KEY=value" entries, sorted.
func Environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Keys are the names (never the values) of env, sorted, for logs.
func Keys[V any](env map[string]V) []string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
