package codex

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
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
		return nil, failedNone("the run has no attempt")
	}
	if run.Host == nil {
		return nil, failedNone("the run has no host")
	}
	threadID, err := parseBinding(run.Binding)
	if err != nil {
		return nil, err
	}
	p, err := h.sup.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx)
		}
		return nil, failedNone("the codex app-server is not available: %v", err)
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
		return "", failedNone("the session's native binding is not a codex thread binding ({\"threadId\": ...}); reset the session to start a new thread")
	}
	return b.ThreadID, nil
}

func encodeBinding(threadID string) json.RawMessage {
	b, _ := json.Marshal(binding{ThreadID: threadID})
	return b
}

// failedNone is a harness_failed error for an attempt that did nothing.
func failedNone(format string, args ...any) *teamster.Error {
	return teamster.Errorf(teamster.CodeHarnessFailed, "codex: "+format, args...).WithSideEffects(teamster.SideEffectsNone)
}

// failed is a harness_failed error for an attempt that may have done
// something.
func failed(format string, args ...any) *teamster.Error {
	return teamster.Errorf(teamster.CodeHarnessFailed, "codex: "+format, args...).WithSideEffects(teamster.SideEffectsPossible)
}

// ctxError is the attempt's error once ctx is done: its cause when that is a
// *teamster.Error (cancelled, lease_lost, drain_timeout, deadline_exceeded),
// else deadline_exceeded or cancelled.
func ctxError(ctx context.Context) error {
	var te *teamster.Error
	if errors.As(context.Cause(ctx), &te) && te != nil {
		return te
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return teamster.Errorf(teamster.CodeDeadlineExceeded, "codex: the attempt's deadline passed")
	}
	return teamster.Errorf(teamster.CodeCancelled, "codex: the attempt was cancelled")
}

// hostError is the attempt's error after a failed host callback: the host's
// *teamster.Error, else harness_failed.
func hostError(call string, err error) *teamster.Error {
	var te *teamster.Error
	if errors.As(err, &te) && te != nil {
		return te
	}
	return failed("host %s: %v", call, err)
}
