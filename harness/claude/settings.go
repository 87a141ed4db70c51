package claude

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
)

// PinnedVersion is the @anthropic-ai/claude-code release this harness was
// built and tested against; install.sh installs it.
const PinnedVersion = "2.1.328"

// defaultMinVersion is the oldest CLI the harness accepts unless the
// settings say otherwise: the pinned release, whose stream-json protocol it
// speaks.
const defaultMinVersion = PinnedVersion

// localBinary is where install.sh links the native claude binary, relative
// to the project root.
const localBinary = ".tools/claude/bin/claude"

// defaultKeyEnv is the worker variable the API key is read from when the
// attempt names no auth profile and the settings no apiKeyEnv.
const defaultKeyEnv = "ANTHROPIC_API_KEY"

// Permission modes that never wait for a person.
const (
	modeDontAsk = "dontAsk"
	modeBypass  = "bypassPermissions"
)

// settings are a claude harness entry's "settings" in the worker config.
// Unknown keys are errors, as everywhere in a worker config.
type settings struct {
	// Binary is the claude executable (the native binary). Default:
	// DefaultBinary, the project-local install.
	Binary string `json:"binary,omitempty"`
	// Home is HOME for the CLI: its ~/.claude.json and ~/.claude (the
	// sessions' transcripts under projects/). Default: a directory the
	// harness creates under the system's temp dir and removes on Close
	// (the worker moves transcripts between turns with ExportState and
	// ImportState, so nothing needs to outlive the harness).
	Home string `json:"home,omitempty"`
	// Cwd is the CLI's working directory (where its built-in file and shell
	// tools act). Default: <home>/workspace, created by the harness.
	Cwd string `json:"cwd,omitempty"`
	// BaseURL is ANTHROPIC_BASE_URL for the CLI; default the CLI's own
	// (the Anthropic API).
	BaseURL string `json:"baseUrl,omitempty"`
	// APIKeyEnv names the worker variable that holds the API key of an
	// attempt without authProfileRef; default ANTHROPIC_API_KEY.
	APIKeyEnv string `json:"apiKeyEnv,omitempty"`
	// AuthProfiles resolve an attempt's authProfileRef: each names the
	// worker variable holding that profile's key, optionally its own base
	// URL, and the gateways (tenants) whose attempts may name it. An
	// attempt naming a profile that is not here, or not its gateway's,
	// fails the same way.
	AuthProfiles map[string]authProfile `json:"authProfiles,omitempty"`
	// Env are extra environment variables for the CLI. Their values are
	// never logged. HOME and ANTHROPIC_API_KEY are not accepted here (the
	// settings' home and the auth profiles set them).
	Env map[string]string `json:"env,omitempty"`
	// MinVersion is the oldest CLI version accepted (from `claude
	// --version`); default defaultMinVersion.
	MinVersion string `json:"minVersion,omitempty"`
	// Model is the model of every turn; default the attempt's modelId.
	Model string `json:"model,omitempty"`
	// BuiltinTools are Claude Code's own tools (Read, Edit, Bash, ...) the
	// model may use, further limited by each attempt's toolsAllow. Default
	// none: only the gateway's tools.
	BuiltinTools []string `json:"builtinTools,omitempty"`
	// PermissionMode is dontAsk (default: anything not allowed is denied)
	// or bypassPermissions (the allowed built-in tools run unchecked).
	PermissionMode string `json:"permissionMode,omitempty"`
	// MaxTurns bounds the model requests of one turn (--max-turns); 0: the
	// CLI's default.
	MaxTurns int `json:"maxTurns,omitempty"`
}

// authProfile is one entry of authProfiles.
type authProfile struct {
	APIKeyEnv string `json:"apiKeyEnv"`
	BaseURL   string `json:"baseUrl,omitempty"`
	// Gateways are the tenants whose attempts may name the profile (and
	// spend its key); a profile without gateways serves only the unnamed
	// tenant (a fleet without gateway identities).
	Gateways []string `json:"gateways,omitempty"`
}

// parseSettings reads a harness entry's settings (absent, null and {} are
// all the defaults), applies the defaults and validates them. The default
// home is not created here but by the harness.
func parseSettings(raw json.RawMessage) (settings, error) {
	var s settings
	if err := nativecli.DecodeSettings(raw, &s, "claude settings"); err != nil {
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
	if s.APIKeyEnv == "" {
		s.APIKeyEnv = defaultKeyEnv
	}
	if s.PermissionMode == "" {
		s.PermissionMode = modeDontAsk
	}
	return nil
}

// builtinToolNames are the names the built-in tools list may hold: letters,
// digits and underscores (a tool name, not a permission rule).
func validToolName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// validate checks the settings; it does not look at the file system.
func (s *settings) validate() error {
	if s.Binary == "" {
		return errors.New("claude settings: binary is empty")
	}
	if _, err := parseVersion(s.MinVersion); err != nil {
		return fmt.Errorf("claude settings: minVersion: %w", err)
	}
	if !nativecli.ValidEnvName(s.APIKeyEnv) {
		return fmt.Errorf("claude settings: apiKeyEnv %q is not a variable name", s.APIKeyEnv)
	}
	for ref, p := range s.AuthProfiles {
		if ref == "" {
			return errors.New("claude settings: authProfiles has an empty profile name")
		}
		if !nativecli.ValidEnvName(p.APIKeyEnv) {
			return fmt.Errorf("claude settings: authProfiles[%q].apiKeyEnv %q is not a variable name", ref, p.APIKeyEnv)
		}
		if p.BaseURL != "" && !validURL(p.BaseURL) {
			return fmt.Errorf("claude settings: authProfiles[%q].baseUrl %q is not an http(s) URL", ref, p.BaseURL)
		}
	}
	if s.BaseURL != "" && !validURL(s.BaseURL) {
		return fmt.Errorf("claude settings: baseUrl %q is not an http(s) URL", s.BaseURL)
	}
	for k, v := range s.Env {
		if !nativecli.ValidEnvName(k) {
			return fmt.Errorf("claude settings: env key %q is not a variable name", k)
		}
		if k == "HOME" || k == "ANTHROPIC_API_KEY" {
			return fmt.Errorf("claude settings: env may not set %s (use the settings home, apiKeyEnv or authProfiles)", k)
		}
		if strings.ContainsRune(v, 0) {
			// The value may be a secret: name the key only.
			return fmt.Errorf("claude settings: env %s contains a NUL byte", k)
		}
	}
	for name, p := range map[string]string{"home": s.Home, "cwd": s.Cwd} {
		if p != "" && !filepath.IsAbs(p) {
			return fmt.Errorf("claude settings: %s %q is not an absolute path", name, p)
		}
	}
	for _, t := range s.BuiltinTools {
		if !validToolName(t) {
			return fmt.Errorf("claude settings: builtinTools entry %q is not a tool name", t)
		}
		if strings.HasPrefix(t, "mcp__") {
			return fmt.Errorf("claude settings: builtinTools entry %q is an MCP tool; the gateway's tools are the attempt's", t)
		}
	}
	if s.PermissionMode != modeDontAsk && s.PermissionMode != modeBypass {
		return fmt.Errorf("claude settings: permissionMode %q is not %s or %s (the modes that never wait for a person)", s.PermissionMode, modeDontAsk, modeBypass)
	}
	if s.MaxTurns < 0 {
		return fmt.Errorf("claude settings: maxTurns %d is negative", s.MaxTurns)
	}
	return nil
}

func validURL(u string) bool {
	return (strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) && !strings.ContainsAny(u, " \x00\n")
}

// DefaultBinary is the project-local claude install: .tools/claude/bin/claude
// (install.sh links the native binary there) in the working directory or the
// nearest parent directory that has one. When there is none, it returns where
// install.sh would put it (under the nearest directory with a go.mod, else
// the working directory), so that the error names that path.
func DefaultBinary() (string, error) {
	return nativecli.FindBinary(localBinary, "claude settings")
}

// checkBinary reports a missing or unusable binary with what to do about it.
func checkBinary(path string) error {
	return nativecli.CheckBinary(path, "claude", "harness/claude/install.sh installs @anthropic-ai/claude-code "+PinnedVersion)
}

// inheritedEnv are the variables of the worker's environment the CLI
// inherits; everything else (the worker's own settings and credentials,
// other providers' keys) stays out of a process that runs model-chosen
// tools.
var inheritedEnv = []string{
	"PATH", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
}

// quietEnv turns off what a worker's CLI must not do: update itself, send
// telemetry, error reports or other non-essential traffic, defer MCP tools
// behind a tool search (the model would first have to search for the
// gateway's tools), set a terminal title.
var quietEnv = map[string]string{
	"DISABLE_AUTOUPDATER":                      "1",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	"DISABLE_TELEMETRY":                        "1",
	"DISABLE_ERROR_REPORTING":                  "1",
	"CLAUDE_CODE_DISABLE_TERMINAL_TITLE":       "1",
	"ENABLE_TOOL_SEARCH":                       "false",
}

// credentials are what one attempt's CLI authenticates with.
type credentials struct {
	keyEnv  string // the worker variable it came from (for errors and logs)
	key     string // never logged
	baseURL string
}

// credentialsFor resolves an attempt's authProfileRef ("" for the default)
// to the key in the worker's environment.
//
// A profile is the tenant's own or, to the tenant, not configured: the
// answer for another gateway's profile is the answer for a name nobody
// configured.
func (s *settings) credentialsFor(tenant, ref string) (credentials, error) {
	c := credentials{keyEnv: s.APIKeyEnv, baseURL: s.BaseURL}
	if ref != "" {
		p, ok := s.AuthProfiles[ref]
		if ok && (tenant == "" && len(p.Gateways) > 0 || tenant != "" && !slices.Contains(p.Gateways, tenant)) {
			ok = false
		}
		if !ok {
			return credentials{}, fmt.Errorf("the attempt's auth profile %.80q is not configured (harness setting authProfiles)", ref)
		}
		c.keyEnv = p.APIKeyEnv
		if p.BaseURL != "" {
			c.baseURL = p.BaseURL
		}
	}
	c.key = os.Getenv(c.keyEnv)
	if c.key == "" {
		return credentials{}, fmt.Errorf("the worker variable %s that holds the API key is not set", c.keyEnv)
	}
	return c, nil
}

// environ is the CLI's environment: the inherited variables, HOME, the
// quiet switches, the base URL, the settings' env, then the key (c may be
// the zero value: no key, for `claude --version`).
func (s *settings) environ(home string, c credentials) []string {
	env := nativecli.Inherit(inheritedEnv)
	// A proxy must not see the loopback traffic (the gateway's MCP server,
	// a local endpoint).
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if v := env[k]; v != "" || env["HTTP_PROXY"] != "" || env["HTTPS_PROXY"] != "" || env["http_proxy"] != "" || env["https_proxy"] != "" {
			env[k] = strings.TrimPrefix(v+",127.0.0.1,localhost", ",")
		}
	}
	env["HOME"] = home
	for k, v := range quietEnv {
		env[k] = v
	}
	if c.baseURL != "" {
		env["ANTHROPIC_BASE_URL"] = c.baseURL
	}
	for k, v := range s.Env {
		env[k] = v
	}
	if c.key != "" {
		env["ANTHROPIC_API_KEY"] = c.key
	}
	return nativecli.Environ(env)
}

// envKeys are the names (never the values) of the settings' extra
// variables, for logs.
func (s *settings) envKeys() []string { return nativecli.Keys(s.Env) }

// profileNames are the configured auth profiles' names, for logs.
func (s *settings) profileNames() []string {
	var out []string
	for k := range s.AuthProfiles {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
