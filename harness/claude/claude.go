package claude

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
	"github.com/teamster-fleet/teamster/selection"
)

// fingerprintPrefix starts the runtime artifact fingerprint of a claude run:
// "claude-code/<version>", the version `claude --version` reported.
const fingerprintPrefix = "claude-code/"

// claudeHarness is the claude harness: it runs each attempt as one claude
// process (see the package doc). It is safe for concurrent use: turns of
// different sessions run in processes of their own.
type claudeHarness struct {
	m       selection.Manifest
	s       settings
	log     logrus.FieldLogger
	home    string // HOME of every CLI process
	ownHome bool   // the harness created home and removes it on Close
	cwd     string

	vmu sync.Mutex
	ver *version // the CLI's version, once checked

	hmu     sync.Mutex
	started func(attemptID string, pid int) // tests observe the processes
}

var (
	_ harness.Harness           = (*claudeHarness)(nil)
	_ harness.ArtifactValidator = (*claudeHarness)(nil)
	_ harness.StateCarrier      = (*claudeHarness)(nil)
	_ harness.Resetter          = (*claudeHarness)(nil)
	_ harness.Finalizer         = (*claudeHarness)(nil)
	_ harness.Workspacer        = (*claudeHarness)(nil)
	_ io.Closer                 = (*claudeHarness)(nil)
)

// Factory builds a claude harness from a worker config's harness entry: its
// manifest and its raw "settings" (see the package doc), with log receiving
// the harness's logs (nil discards them). It checks the settings and that
// the binary exists, and creates the default home; the CLI's version is
// checked with the first turn. The harness is an io.Closer: Close removes
// the home it created. The worker registers Factory as implementation
// "claude".
func Factory(m selection.Manifest, raw json.RawMessage, log logrus.FieldLogger) (harness.Harness, error) {
	s, err := parseSettings(raw)
	if err != nil {
		return nil, err
	}
	return newHarness(m, s, log)
}

// newHarness returns a claude harness registered with manifest m.
func newHarness(m selection.Manifest, s settings, log logrus.FieldLogger) (*claudeHarness, error) {
	if err := s.applyDefaults(); err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	if err := checkBinary(s.Binary); err != nil {
		return nil, err
	}
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	log = log.WithField("harness", m.ID)
	h := &claudeHarness{m: m, s: s, log: log, home: s.Home, cwd: s.Cwd}
	if h.home == "" {
		dir, err := os.MkdirTemp("", "teamster-claude-")
		if err != nil {
			return nil, fmt.Errorf("claude: create the CLI's home: %w", err)
		}
		h.home, h.ownHome = dir, true
	} else if err := os.MkdirAll(h.home, 0o700); err != nil {
		return nil, fmt.Errorf("claude: create the CLI's home: %w", err)
	}
	if h.cwd == "" {
		h.cwd = filepath.Join(h.home, "workspace")
	}
	if err := os.MkdirAll(h.cwd, 0o700); err != nil {
		return nil, fmt.Errorf("claude: create the CLI's working directory: %w", err)
	}
	// Names of variables and profiles, never their values.
	log.WithFields(logrus.Fields{"binary": s.Binary, "home": h.home, "cwd": h.cwd, "minVersion": s.MinVersion,
		"model": s.Model, "apiKeyEnv": s.APIKeyEnv, "authProfiles": s.profileNames(), "builtinTools": s.BuiltinTools,
		"permissionMode": s.PermissionMode, "env": s.envKeys()}).Info("claude: harness configured")
	return h, nil
}

// Manifest returns the harness's manifest.
func (h *claudeHarness) Manifest() selection.Manifest { return h.m }

// Workspace is the CLI's working directory (settings cwd, else the
// harness's home's workspace), where its file tools work: reply attachments
// are read from it.
func (h *claudeHarness) Workspace(*harness.Run) string { return h.cwd }

// Supports applies the standard route contract to the manifest.
func (h *claudeHarness) Supports(a *bus.Attempt) (bool, string) {
	return harness.SupportsManifest(h.m, a)
}

// Close removes the home the harness created (none when the settings name
// one). Turns still running keep their processes until they end.
func (h *claudeHarness) Close() error {
	if h.ownHome {
		return os.RemoveAll(h.home)
	}
	return nil
}

// version checks the CLI's version against minVersion, once per harness
// (a failed check is tried again by the next turn).
func (h *claudeHarness) version(ctx context.Context) (version, error) {
	h.vmu.Lock()
	defer h.vmu.Unlock()
	if h.ver != nil {
		return *h.ver, nil
	}
	v, err := probeVersion(ctx, &h.s, h.home)
	if err != nil {
		return version{}, err
	}
	if err := checkVersion(v, h.s.MinVersion); err != nil {
		return v, err
	}
	h.ver = &v
	h.log.WithField("version", v.String()).Info("claude: CLI version checked")
	return v, nil
}

func (h *claudeHarness) artifact(v version) bus.RuntimeArtifact {
	return bus.RuntimeArtifact{ID: h.m.ID, Fingerprint: fingerprintPrefix + v.String()}
}

// ValidateRuntimeArtifact accepts exactly the artifact of the installed CLI
// ({id: <harness id>, fingerprint: claude-code/<version>}).
func (h *claudeHarness) ValidateRuntimeArtifact(ctx context.Context, a bus.RuntimeArtifact) error {
	v, err := h.version(ctx)
	if err != nil {
		return teamster.Errorf(teamster.CodeRuntimeArtifactMismatch, "claude: the CLI's version cannot be checked to compare its runtime artifact: %v", err).
			WithSideEffects(teamster.SideEffectsNone)
	}
	return harness.CheckExpectedArtifact(&a, h.artifact(v))
}

// RunAttempt runs the attempt as one claude process: a new session, or the
// session of the binding resumed. Every error it returns is a
// *teamster.Error.
func (h *claudeHarness) RunAttempt(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	return h.run(ctx, run, false)
}

// FinalizeSettledTurn is the settled-turn finalization (harness.Finalizer):
// the settled turn's session resumed with the host's instruction as its one
// prompt and every tool withheld, which the CLI enforces: --tools "" (no
// built-in tool), --strict-mcp-config with no MCP server (the attempt offers
// no gateway tool, and a finalization may offer none), --max-turns 1, no
// steering (no injection handle), permission prompts off, and the harness's
// own HOME (no user settings or hooks). A session without a binding has no
// thread to continue: that is harness_failed, with nothing started.
func (h *claudeHarness) FinalizeSettledTurn(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	if run == nil || run.Attempt == nil {
		return nil, errs.FailedNone("the run has no attempt")
	}
	a := run.Attempt
	if len(run.Binding) == 0 {
		return nil, errs.FailedNone("a finalization continues the settled turn's session, and this session has no Claude Code session")
	}
	if a.ToolsAllow == nil || len(*a.ToolsAllow) > 0 || len(a.Tools) > 0 {
		return nil, errs.FailedNone("a finalization runs with every tool withheld (toolsAllow [] and no tools)")
	}
	return h.run(ctx, run, true)
}

// run runs a turn, or a finalization (final).
func (h *claudeHarness) run(ctx context.Context, run *harness.Run, final bool) (*harness.Outcome, error) {
	if run == nil || run.Attempt == nil {
		return nil, errs.FailedNone("the run has no attempt")
	}
	if run.Host == nil {
		return nil, errs.FailedNone("the run has no host")
	}
	sessionID, err := parseBinding(run.Binding)
	if err != nil {
		return nil, err
	}
	v, err := h.version(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errs.Ctx(ctx)
		}
		return nil, errs.FailedNone("%v", err)
	}
	// Before anything starts: the artifact check.
	captured, err := harness.VerifyRuntimeArtifact(run.Attempt, h.artifact(v))
	if err != nil {
		return nil, err
	}
	creds, err := h.s.credentialsFor(run.Attempt.Tenant, run.Attempt.AuthProfileRef)
	if err != nil {
		return nil, errs.FailedNone("%v", err)
	}
	t := newTurn(h, run, ctx, sessionID, creds)
	t.final = final
	out, err := t.drive()
	if err != nil {
		return nil, err
	}
	out.RuntimeArtifact = captured
	return out, nil
}

// binding is the claude harness's native session binding: the CLI's
// session, whose transcript is under HOME/.claude/projects.
type binding struct {
	SessionID string `json:"sessionId"`
}

// parseBinding returns the session id of a stored binding, "" for a session
// without one. A binding that is not a claude binding is refused: starting
// a new session would silently drop the session's history.
func parseBinding(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var b binding
	if err := json.Unmarshal(raw, &b); err != nil || !validSessionID(b.SessionID) {
		return "", errs.FailedNone("the session's native binding is not a claude session binding ({\"sessionId\": \"<uuid>\"}); reset the session to start a new one")
	}
	return b.SessionID, nil
}

// validSessionID accepts the CLI's session ids (UUIDs): hex digits and
// dashes, so that one can never read as a flag or a path.
func validSessionID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i, r := range id {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return false
			}
		case !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F'):
			return false
		}
	}
	return true
}

func encodeBinding(sessionID string) json.RawMessage {
	b, _ := json.Marshal(binding{SessionID: sessionID})
	return b
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// randomToken returns n random bytes in hex.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// errs makes the harness's attempt errors, each message starting "claude: ".
const errs nativecli.Errors = "claude: "
