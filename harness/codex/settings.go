package codex

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// PinnedVersion is the @openai/codex release this harness was built and
// tested against; install.sh installs it.
const PinnedVersion = "0.171.0"

// defaultMinVersion is the oldest app-server the harness accepts unless the
// settings say otherwise: the pinned release, whose protocol it speaks.
const defaultMinVersion = PinnedVersion

// localBinary is where install.sh links the native codex binary, relative to
// the project root.
const localBinary = ".tools/codex/bin/codex"

// settings are a codex harness entry's "settings" in the worker config.
// Unknown keys are errors, as everywhere in a worker config.
type settings struct {
	// Binary is the codex executable (the native binary or the npm
	// launcher). Default: DefaultBinary, the project-local install.
	Binary string `json:"binary,omitempty"`
	// CodexHome is CODEX_HOME for the app-server: its config.toml, auth
	// and the threads' rollouts (which the worker carries between workers
	// as the session's native state, so workers need not share it).
	// Default: CODEX_HOME of the worker's environment, else codex's own
	// default (~/.codex).
	CodexHome string `json:"codexHome,omitempty"`
	// Env are extra environment variables for the app-server, typically
	// the provider's API key named by its env_key. Their values are never
	// logged.
	Env map[string]string `json:"env,omitempty"`
	// MinVersion is the oldest app-server version accepted (from the
	// initialize handshake); default defaultMinVersion.
	MinVersion string `json:"minVersion,omitempty"`
	// AllowApprovals accepts the app-server's approval requests (commands,
	// file changes, permissions) instead of declining them.
	AllowApprovals bool `json:"allowApprovals,omitempty"`
	// Model is the model of every thread; default the attempt's modelId.
	Model string `json:"model,omitempty"`
	// Cwd is the working directory of the app-server and of its threads;
	// default the worker's.
	Cwd string `json:"cwd,omitempty"`
}

// parseSettings reads a harness entry's settings (absent, null and {} are
// all the defaults), applies the defaults and validates them.
func parseSettings(raw json.RawMessage) (settings, error) {
	var s settings
	if err := nativecli.DecodeSettings(raw, &s, "codex settings"); err != nil {
		return settings{}, err
	}
	if err := s.applyDefaults(); err != nil {
		return settings{}, err
	}
	if err := s.validate(); err != nil {
		return settings{}, err
	}
	return s, nil
}

func (s *settings) applyDefaults() error {
	if s.Binary == "" {
		b, err := DefaultBinary()
		if err != nil {
			return err
		}
		s.Binary = b
	}
	if s.MinVersion == "" {
		s.MinVersion = defaultMinVersion
	}
	return nil
}

// validate checks the settings; it does not look at the file system.
func (s *settings) validate() error {
	if s.Binary == "" {
		return errors.New("codex settings: binary is empty")
	}
	if _, err := parseVersion(s.MinVersion); err != nil {
		return fmt.Errorf("codex settings: minVersion: %w", err)
	}
	for k, v := range s.Env {
		if !nativecli.ValidEnvName(k) {
			return fmt.Errorf("codex settings: env key %q is not a variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			// The value is a secret: name the key only.
			return fmt.Errorf("codex settings: env %s contains a NUL byte", k)
		}
	}
	for name, p := range map[string]string{"codexHome": s.CodexHome, "cwd": s.Cwd} {
		if p != "" && !filepath.IsAbs(p) {
			return fmt.Errorf("codex settings: %s %q is not an absolute path", name, p)
		}
	}
	return nil
}

// DefaultBinary is the project-local codex install: .tools/codex/bin/codex
// (install.sh links the native binary there) in the working directory or the
// nearest parent directory that has one. When there is none, it returns where
// install.sh would put it (under the nearest directory with a go.mod, else
// the working directory), so that the error names that path.
func DefaultBinary() (string, error) {
	return nativecli.FindBinary(localBinary, "codex settings")
}

// checkBinary reports a missing or unusable binary with what to do about it.
func checkBinary(path string) error {
	return nativecli.CheckBinary(path, "codex", "harness/codex/install.sh installs @openai/codex "+PinnedVersion)
}

// inheritedEnv are the variables of the worker's environment the app-server
// inherits; everything else (the worker's own settings and credentials) stays
// out of a process that runs model-chosen commands.
var inheritedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "CODEX_HOME",
}

// environ is the app-server's environment: the inherited variables, then
// CODEX_HOME from the settings, then the settings' env (which wins).
func (s *settings) environ() []string {
	env := nativecli.Inherit(inheritedEnv)
	if s.CodexHome != "" {
		env["CODEX_HOME"] = s.CodexHome
	}
	for k, v := range s.Env {
		env[k] = v
	}
	return nativecli.Environ(env)
}

// envKeys are the names (never the values) of the settings' extra
// variables, for logs.
func (s *settings) envKeys() []string { return nativecli.Keys(s.Env) }
