package codex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/teamster-fleet/teamster/harness"
)

// Native state: what another worker's app-server needs to resume a thread is
// the thread's rollout, the JSONL file CODEX_HOME/sessions/YYYY/MM/DD/
// rollout-<time>-<threadId>.jsonl that the app-server appends to during
// each turn and finds again by thread id on thread/resume. The worker saves
// it after each successful turn and restores it, at the same path under its
// own CODEX_HOME, before the thread's next turn
// (TestResumeOnAWorkerThatSharesNoCodexHome).

var _ harness.StateCarrier = (*codexHarness)(nil)

// codexHome is the app-server's CODEX_HOME: the settings' (or their env's),
// the worker's, else codex's default ~/.codex.
func (s *settings) codexHome() (string, error) {
	home := ""
	for _, kv := range s.environ() {
		if v, ok := strings.CutPrefix(kv, "CODEX_HOME="); ok && v != "" {
			return v, nil
		}
		if v, ok := strings.CutPrefix(kv, "HOME="); ok && v != "" {
			home = filepath.Join(v, ".codex")
		}
	}
	if home == "" {
		return "", errors.New("codex: neither CODEX_HOME nor HOME is set, so the threads' rollouts cannot be found")
	}
	return home, nil
}

// ExportState packs the rollout of the binding's thread.
func (h *codexHarness) ExportState(ctx context.Context, raw json.RawMessage) ([]byte, error) {
	threadID, err := parseBinding(raw)
	if err != nil || threadID == "" {
		return nil, err
	}
	home, err := h.s.codexHome()
	if err != nil {
		return nil, err
	}
	rels, err := rolloutsOf(home, threadID)
	if err != nil {
		return nil, err
	}
	if len(rels) == 0 {
		return nil, fmt.Errorf("codex: no rollout of thread %s under %s", threadID, filepath.Join(home, "sessions"))
	}
	return harness.PackFiles(home, rels)
}

// ImportState writes the rollout back under this worker's CODEX_HOME.
func (h *codexHarness) ImportState(ctx context.Context, raw json.RawMessage, blob []byte) error {
	home, err := h.s.codexHome()
	if err != nil {
		return err
	}
	_, err = harness.UnpackFiles(home, blob, func(rel string) error {
		if !strings.HasPrefix(rel, "sessions/") {
			return fmt.Errorf("codex: native state holds %.200q, outside sessions/", rel)
		}
		return nil
	})
	return err
}

// rolloutsOf are the rollout files of a thread, relative to home.
func rolloutsOf(home, threadID string) ([]string, error) {
	suffix := "-" + threadID + ".jsonl"
	var out []string
	err := filepath.WalkDir(filepath.Join(home, "sessions"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipDir
			}
			return err
		}
		if d.Type().IsRegular() && strings.HasPrefix(d.Name(), "rollout-") && strings.HasSuffix(d.Name(), suffix) {
			rel, err := filepath.Rel(home, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return out, nil
}
