package claude_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/claude"
	"github.com/teamster-fleet/teamster/harness/claude/claudetest"
	"github.com/teamster-fleet/teamster/selection"
)

// secretKey is the API key the tests' worker environment holds; it must
// reach the endpoint and nothing else.
const secretKey = "sk-ant-teamster-test-SECRET-4242"

var manifest = selection.Manifest{
	ID: "claude", Label: "Claude Code", PluginID: "claude",
	AutoSelection: &selection.AutoSelection{ProviderIDs: []string{"anthropic"}}, Priority: 100,
	Injection: selection.InjectionV2,
}

func attempt(session, prompt string) *bus.Attempt {
	return &bus.Attempt{
		V: bus.Version, AttemptID: "att-" + strings.ReplaceAll(session, ":", "-"), AgentID: "main", SessionKey: session, SessionID: "sid-" + session,
		Provider: "anthropic", ModelID: claudetest.Model, AgentHarnessID: "claude",
		Prompt: prompt, TimeoutMs: 120_000,
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// rig is one harness instance against one endpoint.
type rig struct {
	t        *testing.T
	endpoint *claudetest.Endpoint
	h        *claude.Harness
	logs     *syncBuffer
}

// newRig starts an endpoint playing replies and a harness with its own home
// talking to it; edit changes the settings first.
func newRig(t *testing.T, e *claudetest.Endpoint, edit func(*claude.Settings)) *rig {
	t.Helper()
	if e == nil {
		e = claudetest.NewEndpoint(t)
	}
	t.Setenv(claudetest.KeyEnv, secretKey)
	s := claude.Settings{Binary: claudetest.Binary(t), Home: t.TempDir(), Cwd: t.TempDir(), BaseURL: e.BaseURL(), APIKeyEnv: claudetest.KeyEnv}
	if edit != nil {
		edit(&s)
	}
	logs := &syncBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetLevel(logrus.DebugLevel)
	h, err := claude.New(manifest, s, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &rig{t: t, endpoint: e, h: h, logs: logs}
}

// event is one event a host received.
type event struct {
	Type string
	Data json.RawMessage
}

// recHost is a harness.Host that records everything and answers tools with
// toolResult (or fails them with toolErr).
type recHost struct {
	mu         sync.Mutex
	events     []event
	calls      []bus.ToolCall
	terms      []bus.ToolTerminal
	usage      []usageReport
	toolResult json.RawMessage
	toolErr    *teamster.Error
}

type usageReport struct {
	ID     string
	Tokens int64
}

func (h *recHost) Emit(_ context.Context, typ string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.events = append(h.events, event{typ, b})
	h.mu.Unlock()
	return nil
}

func (h *recHost) Tool(_ context.Context, c bus.ToolCall) (*bus.ToolReply, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
	if h.toolErr != nil {
		return &bus.ToolReply{V: bus.Version, Status: bus.StatusRejected, Error: h.toolErr}, nil
	}
	return &bus.ToolReply{V: bus.Version, Status: bus.StatusOK, Result: h.toolResult}, nil
}

func (h *recHost) ToolTerminal(_ context.Context, tt bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.terms = append(h.terms, tt)
	r := &bus.ToolTerminalReply{V: bus.Version, Status: bus.StatusOK}
	if tt.Outcome == bus.OutcomeFailure {
		r.LastToolError, _ = json.Marshal(map[string]any{"toolName": tt.Name, "error": tt.Error})
	}
	return r, nil
}

func (h *recHost) UserInput(context.Context, bus.UserInput) (*bus.UserInputReply, error) {
	return nil, teamster.Errorf(teamster.CodeHarnessFailed, "no questions here")
}

func (h *recHost) ReportUsage(_ context.Context, id string, tokens int64) error {
	h.mu.Lock()
	h.usage = append(h.usage, usageReport{id, tokens})
	h.mu.Unlock()
	return nil
}

func (h *recHost) snapshot() (evs []event, calls []bus.ToolCall, terms []bus.ToolTerminal, usage []usageReport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]event(nil), h.events...), append([]bus.ToolCall(nil), h.calls...),
		append([]bus.ToolTerminal(nil), h.terms...), append([]usageReport(nil), h.usage...)
}

// partialText joins the partial events' texts.
func partialText(t *testing.T, evs []event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range evs {
		if e.Type == bus.EventPartial {
			var d bus.PartialData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

// sessionOf is the session id of an outcome's binding.
func sessionOf(t *testing.T, out *harness.Outcome) string {
	t.Helper()
	var b struct {
		SessionID string `json:"sessionId"`
	}
	if out == nil || json.Unmarshal(out.NativeSession, &b) != nil || len(b.SessionID) != 36 {
		t.Fatalf("native session %s is not a claude binding", func() string {
			if out == nil {
				return "<no outcome>"
			}
			return string(out.NativeSession)
		}())
	}
	return b.SessionID
}

// wantCode fails the test unless err is a *teamster.Error with code and
// side effects.
func wantCode(t *testing.T, err error, code teamster.Code, se teamster.SideEffects) *teamster.Error {
	t.Helper()
	e := teamster.AsError(err)
	if e == nil || e.Code != code || e.SideEffects != se {
		t.Fatalf("error %v, want %s with sideEffects %s", err, code, se)
	}
	return e
}
