package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
)

// A scripted turn calls a host tool through the fleet and the gateway's
// handler result appears in the turn; a failure reported through
// toolTerminal comes back as lastToolError; usage reported twice for one
// response counts once and the cumulative events are right.
func TestHostCallbacksThroughTheFleet(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	tools := client.NewTools().
		Register("lookup", func(_ context.Context, args json.RawMessage) (any, error) {
			var a struct{ Q string }
			_ = json.Unmarshal(args, &a)
			return map[string]any{"answer": 42, "q": a.Q}, nil
		}).
		Register("deploy", func(context.Context, json.RawMessage) (any, error) {
			return nil, errors.New("the cluster said no")
		})
	srv, err := f.Client.ServeHost("gw-1", tools)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	a := fleettest.Attempt("host:alice", fleettest.Script(
		`{"tool":{"name":"lookup","args":{"q":"meaning"}}}`,
		`{"usage":{"responseId":"r1","outputTokens":30}}`,
		`{"usage":{"responseId":"r1","outputTokens":30}}`,
		`{"usage":{"responseId":"r2","outputTokens":12}}`,
		`{"tool":{"name":"deploy"}}`,
		`{"say":"done"}`))
	a.HostID = "gw-1"
	h := submit(t, f, a)
	var usage []int64
	for e := range h.Events() {
		if e.Type == bus.EventUsage {
			var u bus.UsageData
			mustJSON(t, e.Data, &u)
			usage = append(usage, u.OutputTokens)
		}
	}
	r := result(t, h)
	if r.Status != teamster.StatusOK {
		t.Fatalf("result %+v", r)
	}
	if !slices.ContainsFunc(r.AssistantTexts, func(s string) bool { return strings.Contains(s, `"answer":42`) && strings.Contains(s, `"q":"meaning"`) }) {
		t.Fatalf("the tool's result is not in the turn: %q", r.AssistantTexts)
	}
	if !slices.Equal(usage, []int64{30, 42}) || r.Usage.OutputTokens != 42 {
		t.Fatalf("usage events %v and total %d; want cumulative [30 42] and 42", usage, r.Usage.OutputTokens)
	}
	var last struct {
		ToolName string          `json:"toolName"`
		Error    json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(r.LastToolError, &last); err != nil || last.ToolName != "deploy" || !strings.Contains(string(last.Error), "the cluster said no") {
		t.Fatalf("lastToolError %s (%v), want the deploy failure", r.LastToolError, err)
	}
	if got := tools.Reported(h.AttemptID()); got != 42 {
		t.Fatalf("the host was told %d output tokens, want 42 (each response once)", got)
	}
}

// A turn whose gateway stops answering host calls ends with deadline_exceeded
// at its deadline, never hangs, and its lease is released.
func TestSilentGatewayEndsAtTheDeadline(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	a := fleettest.Attempt("host:silent", fleettest.Script(`{"say":"asking"}`, `{"tool":{"name":"lookup"}}`))
	a.HostID = "gw-gone" // nobody serves it
	a.TimeoutMs = 800
	h := submit(t, f, a)
	r := result(t, h)
	if r.Status != teamster.StatusTimeout || r.Error.Code != teamster.CodeDeadlineExceeded {
		t.Fatalf("result %+v, want deadline_exceeded", r)
	}
	if _, err := leases.NewStore(f.RDB).LeaseOf(t.Context(), "host:silent"); !errors.Is(err, leases.ErrNotFound) {
		t.Fatalf("lease after the deadline: %v, want released", err)
	}
}

// A mismatched expectedRuntimeArtifact fails before the harness starts
// anything; a matching one runs, and captureRuntimeArtifact returns the
// harness's {id, fingerprint}.
func TestRuntimeArtifacts(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	capture := fleettest.Attempt("artifact:a", "probe")
	capture.CaptureRuntimeArtifact = true
	r := result(t, submit(t, f, capture))
	if r.Status != teamster.StatusOK || r.RuntimeArtifact == nil || r.RuntimeArtifact.ID == "" || r.RuntimeArtifact.Fingerprint == "" {
		t.Fatalf("captured artifact %+v", r)
	}
	same := fleettest.Attempt("artifact:a", "continue")
	same.ExpectedRuntimeArtifact = r.RuntimeArtifact
	if r2 := result(t, submit(t, f, same)); r2.Status != teamster.StatusOK {
		t.Fatalf("continuation with the same artifact: %+v", r2)
	}
	other := fleettest.Attempt("artifact:a", "mismatch")
	other.ExpectedRuntimeArtifact = &bus.RuntimeArtifact{ID: r.RuntimeArtifact.ID, Fingerprint: "another-build"}
	h := submit(t, f, other)
	r3 := result(t, h)
	if r3.Error == nil || r3.Error.Code != teamster.CodeRuntimeArtifactMismatch || r3.Error.SideEffects != teamster.SideEffectsNone {
		t.Fatalf("mismatched artifact: %+v", r3)
	}
	for _, e := range f.Ledger.Entries() {
		if e.Attempt == h.AttemptID() {
			t.Fatal("the harness started a run whose expected artifact did not match")
		}
	}
}
