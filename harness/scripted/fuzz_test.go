package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/scripted"
)

// FuzzScript plays arbitrary prompts against a host double under a short
// deadline: RunAttempt never panics, every error is a *teamster.Error (not
// wrapped) with a valid code, and a successful run returns a binding.
//
//	go test ./harness/scripted -run='^$' -fuzz='^FuzzScript$' -fuzztime=20s
func FuzzScript(f *testing.F) {
	for _, s := range []string{
		"hello",
		"",
		`{"script":[]}`,
		`{"script":[{"say":"a"},{"reason":"r"},{"plan":"p"},{"usage":3}]}`,
		`{"script":[{"tool":{"name":"t","args":{"a":1}}},{"tool":{"name":"fail"}}]}`,
		`{"script":[{"sleep":5},{"awaitInjection":5}]}`,
		`{"script":[{"sleep":86400000}]}`,
		`{"script":[{"fail":"boom %d"}]}`,
		`{"script":[{"say":1}]}`,
		`{"script":[{"dance":1}]}`,
		`{"script":[{}]}`,
		`{"script":[null]}`,
		`{"script":null}`,
		`{"script":[`,
		`   {"script":[{"say":"\ud800"}]}`,
		`{"script":[{"tool":{"name":"t","args":[]}}]}`,
		`{"script":[{"usage":-9223372036854775808}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prompt string) {
		h := &host{
			toolReply: func(c bus.ToolCall) (*bus.ToolReply, error) {
				if c.Name == "fail" {
					return &bus.ToolReply{V: 1, Status: bus.StatusRejected, Error: teamster.Errorf(teamster.CodeInvalidRequest, "no")}, nil
				}
				return &bus.ToolReply{V: 1, Status: bus.StatusOK, Result: json.RawMessage(`{"ok":true}`)}, nil
			},
			terminalReply: func(tt bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
				if tt.Outcome == bus.OutcomeFailure {
					return &bus.ToolTerminalReply{V: 1, Status: bus.StatusOK, LastToolError: json.RawMessage(`{"error":"no"}`)}, nil
				}
				return &bus.ToolTerminalReply{V: 1, Status: bus.StatusOK}, nil
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		out, err := scripted.New(manifest("v2"), scripted.Options{}).RunAttempt(ctx, newRun(prompt, h))
		if err != nil {
			te, ok := err.(*teamster.Error)
			if !ok || te == nil {
				t.Fatalf("error %v (%T) is not a *teamster.Error", err, err)
			}
			if !te.Code.Valid() {
				t.Fatalf("error %v has an unknown code", err)
			}
			var wrapped *teamster.Error
			if !errors.As(err, &wrapped) {
				t.Fatalf("errors.As failed on %v", err)
			}
			if out != nil {
				t.Fatalf("a failed run returned an outcome")
			}
			return
		}
		if out == nil || out.AssistantTexts == nil || !json.Valid(out.NativeSession) {
			t.Fatalf("outcome %+v of a successful run is incomplete", out)
		}
	})
}
