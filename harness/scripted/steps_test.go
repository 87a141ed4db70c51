package scripted_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/scripted"
)

// The steps that reach outside the run: ask (a question to the host),
// write (the workspace), and a tool-only turn with its finalization.

// An ask step asks the host and appends the answer; a refusal ends the
// attempt with the host's error.
func TestAsk(t *testing.T) {
	h := &host{userInputReply: func(q bus.UserInput) (*bus.UserInputReply, error) {
		return &bus.UserInputReply{V: 1, Status: bus.StatusOK, Answer: "left"}, nil
	}}
	out, err := play(t, script(t, m{"ask": m{"question": "Which way?", "choices": []string{"left", "right"}}}, m{"say": "done"}), h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"left", "done"}, out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bus.UserInput{{V: 1, Question: "Which way?", Choices: []string{"left", "right"}}}, h.questions); diff != "" {
		t.Errorf("questions (-want +got):\n%s", diff)
	}
	refused := &host{userInputReply: func(bus.UserInput) (*bus.UserInputReply, error) {
		return &bus.UserInputReply{V: 1, Status: bus.StatusRejected, Error: teamster.Errorf(teamster.CodeCancelled, "nobody answered")}, nil
	}}
	_, err = play(t, script(t, m{"ask": m{"question": "?"}}), refused)
	wantCode(t, err, teamster.CodeCancelled, "nobody answered")
}

// Write steps write files and symlinks into the workspace, which the
// harness reports; a write without a workspace is harness_failed.

func TestWrite(t *testing.T) {
	ws := filepath.Join(t.TempDir(), "ws") // created by the first write
	h := scripted.New(manifest("none"), scripted.Options{Workspace: ws})
	if got := h.Workspace(nil); got != ws {
		t.Fatalf("Workspace() = %q, want %q", got, ws)
	}
	out, err := h.RunAttempt(context.Background(), newRun(script(t,
		m{"write": m{"path": "out/a.txt", "text": "hello"}},
		m{"write": m{"path": "b.bin", "base64": "AAEC"}},
		m{"write": m{"path": "out/link", "symlink": "/etc/hostname"}},
		m{"write": m{"path": "out/a.txt", "text": "again"}},
		m{"say": "done"}), &host{}))
	if err != nil || out.AssistantTexts[0] != "done" {
		t.Fatalf("%+v, %v", out, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "out/a.txt")); string(b) != "again" {
		t.Errorf("out/a.txt holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "b.bin")); string(b) != "\x00\x01\x02" {
		t.Errorf("b.bin holds %q", b)
	}
	if target, err := os.Readlink(filepath.Join(ws, "out/link")); err != nil || target != "/etc/hostname" {
		t.Errorf("out/link -> %q (%v)", target, err)
	}
	_, err = play(t, script(t, m{"write": m{"path": "a", "text": "x"}}), &host{})
	wantCode(t, err, teamster.CodeHarnessFailed, "no workspace")
}

// A quiet tool step keeps the result out of the reply (a tool-only turn);
// the finalization that follows answers on the same thread, one turn on,
// and calls nothing of the host.

func TestToolOnlyTurnAndItsFinalization(t *testing.T) {
	h := &host{}
	out, err := play(t, script(t, m{"tool": m{"name": "lookup", "quiet": true}}), h)
	if err != nil || len(out.AssistantTexts) != 0 || len(h.calls) != 1 {
		t.Fatalf("tool-only turn: %+v, %v, %d calls", out, err, len(h.calls))
	}
	run := newRun("The previous assistant turn completed its tool calls.\nMore text.", h)
	run.Binding = out.NativeSession
	fin, err := scripted.New(manifest("v2"), scripted.Options{}).FinalizeSettledTurn(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	want := "finalized (thread scripted-s1, turn 2): The previous assistant turn completed its tool calls."
	if diff := cmp.Diff([]string{want}, fin.AssistantTexts); diff != "" {
		t.Errorf("finalization texts (-want +got):\n%s", diff)
	}
	if string(fin.NativeSession) != `{"thread":"scripted-s1","turns":2}` {
		t.Errorf("binding after the finalization %s", fin.NativeSession)
	}
	if len(h.calls) != 1 || run.Injector() != nil {
		t.Errorf("the finalization called the host (%d tool calls) or installed a handle", len(h.calls))
	}
}
