package codex

import (
	"context"
	"encoding/json"
	"io"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/internal/nativecli"
	"github.com/teamster-fleet/teamster/selection"
)

// fingerprintPrefix starts the runtime artifact fingerprint of a codex run:
// "codex-app-server/<version>", the version the handshake reported.
const fingerprintPrefix = "codex-app-server/"

// codexHarness is the codex harness: it runs attempts as turns of the Codex
// app-server (see the package doc). It is safe for concurrent use; all runs
// share one app-server process.
type codexHarness struct {
	m   selection.Manifest
	s   settings
	log logrus.FieldLogger
	sup *supervisor

	mu    sync.Mutex
	trace traceFunc // tests observe the protocol
}

var (
	_ harness.Harness           = (*codexHarness)(nil)
	_ harness.ArtifactValidator = (*codexHarness)(nil)
	_ harness.Workspacer        = (*codexHarness)(nil)
	_ io.Closer                 = (*codexHarness)(nil)
)

// Factory builds a codex harness from a worker config's harness entry: its
// manifest and its raw "settings" (see the package doc), with log receiving
// the harness's logs (nil discards them). It checks the settings and that
// the binary exists; the app-server starts with the first turn. The harness
// is an io.Closer: Close stops the app-server. The worker registers Factory
// as implementation "codex".
func Factory(m selection.Manifest, raw json.RawMessage, log logrus.FieldLogger) (harness.Harness, error) {
	s, err := parseSettings(raw)
	if err != nil {
		return nil, err
	}
	return newHarness(m, s, log)
}

// newHarness returns a codex harness registered with manifest m. It checks
// the settings and that the binary exists; the app-server starts with the
// first turn. A nil log discards the harness's logs.
func newHarness(m selection.Manifest, s settings, log logrus.FieldLogger) (*codexHarness, error) {
	if s.MinVersion == "" {
		s.MinVersion = defaultMinVersion
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
	h := &codexHarness{m: m, s: s, log: log}
	h.sup = newSupervisor(supervisorParams{start: h.startProcess, log: log})
	// Names of variables, never their values.
	log.WithFields(logrus.Fields{"binary": s.Binary, "codexHome": s.CodexHome, "minVersion": s.MinVersion,
		"model": s.Model, "cwd": s.Cwd, "allowApprovals": s.AllowApprovals, "env": s.envKeys()}).
		Info("codex: harness configured")
	return h, nil
}

// Manifest returns the harness's manifest.
func (h *codexHarness) Manifest() selection.Manifest { return h.m }

// Workspace is the app-server's working directory (settings cwd), where its
// threads read and write files: reply attachments are read from it.
func (h *codexHarness) Workspace(*harness.Run) string { return h.s.Cwd }

// Supports applies the standard route contract to the manifest.
func (h *codexHarness) Supports(a *bus.Attempt) (bool, string) {
	return harness.SupportsManifest(h.m, a)
}

// Close stops the app-server (and no longer restarts it); turns still running
// on it end harness_failed.
func (h *codexHarness) Close() error {
	h.sup.shutdown()
	return nil
}

func (h *codexHarness) startProcess(ctx context.Context) (*process, error) {
	h.mu.Lock()
	trace := h.trace
	h.mu.Unlock()
	return startProcess(ctx, processParams{settings: &h.s, log: h.log, trace: trace})
}

// artifact is the runtime artifact of runs on process p.
func (h *codexHarness) artifact(p *process) bus.RuntimeArtifact {
	return bus.RuntimeArtifact{ID: h.m.ID, Fingerprint: fingerprintPrefix + p.version.String()}
}

// ValidateRuntimeArtifact accepts exactly the artifact of the running
// app-server ({id: <harness id>, fingerprint: codex-app-server/<version>}),
// starting it when it is not running.
func (h *codexHarness) ValidateRuntimeArtifact(ctx context.Context, a bus.RuntimeArtifact) error {
	p, err := h.sup.acquire(ctx)
	if err != nil {
		return teamster.Errorf(teamster.CodeRuntimeArtifactMismatch, "codex: the app-server is not available to compare its runtime artifact: %v", err).
			WithSideEffects(teamster.SideEffectsNone)
	}
	return harness.CheckExpectedArtifact(&a, h.artifact(p))
}

// RunAttempt runs the attempt as one turn of the app-server: on the thread
// of the session's binding (thread/resume) or a new one (thread/start). Every
// error it returns is a *teamster.Error.
func (h *codexHarness) RunAttempt(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	if run == nil || run.Attempt == nil {
		return nil, errs.FailedNone("the run has no attempt")
	}
	if run.Host == nil {
		return nil, errs.FailedNone("the run has no host")
	}
	threadID, err := parseBinding(run.Binding)
	if err != nil {
		return nil, err
	}
	p, err := h.sup.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errs.Ctx(ctx)
		}
		return nil, errs.FailedNone("the codex app-server is not available: %v", err)
	}
	// Before any thread is started or resumed: the artifact check.
	captured, err := harness.VerifyRuntimeArtifact(run.Attempt, h.artifact(p))
	if err != nil {
		return nil, err
	}
	t := newTurn(turnParams{h: h, p: p, run: run, ctx: ctx, threadID: threadID})
	out, err := t.drive()
	if err != nil {
		return nil, err
	}
	out.RuntimeArtifact = captured
	return out, nil
}

// binding is the codex harness's native session binding: the app-server
// thread that holds the session's conversation (in CODEX_HOME).
type binding struct {
	ThreadID string `json:"threadId"`
}

// parseBinding returns the thread id of a stored binding, "" for a session
// without one. A binding that is not a codex binding is refused: starting a
// new thread would silently drop the session's history.
func parseBinding(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var b binding
	if err := json.Unmarshal(raw, &b); err != nil || b.ThreadID == "" {
		return "", errs.FailedNone("the session's native binding is not a codex thread binding ({\"threadId\": ...}); reset the session to start a new thread")
	}
	return b.ThreadID, nil
}

func encodeBinding(threadID string) json.RawMessage {
	b, _ := json.Marshal(binding{ThreadID: threadID})
	return b
}

// errs makes the harness's attempt errors, each message starting "codex: ".
const errs nativecli.Errors = "codex: "
