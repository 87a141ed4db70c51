package claude

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

// Native state: what another worker's CLI needs to resume a session is the
// session's transcript, HOME/.claude/projects/<escaped cwd>/<sessionId>.jsonl
// (the escaped cwd is the working directory with every "/" as "-"), which
// the CLI appends to during each turn. `claude --resume <id>` finds it by
// session id under any project directory, so a worker with another cwd
// resumes it too (and appends to it where it is). A session whose tools
// wrote side files keeps them in HOME/.claude/projects/<escaped cwd>/
// <sessionId>/ (subagent transcripts, large tool results); those are packed
// too. Paths are relative to HOME, so they land at the same place under the
// importing worker's home.

// projectsDir is the transcripts' directory, relative to HOME.
const projectsDir = ".claude/projects"

// ExportState packs the transcript (and side files) of the binding's
// session.
func (h *claudeHarness) ExportState(ctx context.Context, raw json.RawMessage) ([]byte, error) {
	sid, err := parseBinding(raw)
	if err != nil || sid == "" {
		return nil, err
	}
	rels, err := sessionFiles(h.home, sid)
	if err != nil {
		return nil, err
	}
	if !hasTranscript(rels, sid) {
		return nil, fmt.Errorf("claude: no transcript of session %s under %s", sid, filepath.Join(h.home, projectsDir))
	}
	return harness.PackFiles(h.home, rels)
}

// ImportState writes the session's files back under this harness's home.
// A blob holding anything outside .claude/projects is refused before
// anything is written.
func (h *claudeHarness) ImportState(ctx context.Context, raw json.RawMessage, blob []byte) error {
	sid, err := parseBinding(raw)
	if err != nil {
		return err
	}
	_, err = harness.UnpackFiles(h.home, blob, func(rel string) error {
		if !strings.HasPrefix(rel, projectsDir+"/") || (sid != "" && !strings.Contains(rel, sid)) {
			return fmt.Errorf("claude: native state holds %.200q, which is not a file of session %s under %s", rel, sid, projectsDir)
		}
		return nil
	})
	return err
}

// Reset deletes the local transcript of a binding's session (the session was
// reset or deleted).
func (h *claudeHarness) Reset(ctx context.Context, sessionKey string, raw json.RawMessage) error {
	sid, err := parseBinding(raw)
	if err != nil || sid == "" {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(h.home, projectsDir, "*"))
	var errs []error
	for _, d := range dirs {
		for _, p := range []string{filepath.Join(d, sid+".jsonl"), filepath.Join(d, sid)} {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// sessionFiles are the regular files of session sid under home's projects,
// relative to home and slash-separated: <dir>/<sid>.jsonl and everything
// under <dir>/<sid>/.
func sessionFiles(home, sid string) ([]string, error) {
	root := filepath.Join(home, projectsDir)
	dirs, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	add := func(p string) error {
		rel, err := filepath.Rel(home, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(root, d.Name())
		if st, err := os.Lstat(filepath.Join(dir, sid+".jsonl")); err == nil && st.Mode().IsRegular() {
			if err := add(filepath.Join(dir, sid+".jsonl")); err != nil {
				return nil, err
			}
		}
		err := filepath.WalkDir(filepath.Join(dir, sid), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if e.Type().IsRegular() {
				return add(p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func hasTranscript(rels []string, sid string) bool {
	for _, r := range rels {
		if strings.HasSuffix(r, "/"+sid+".jsonl") {
			return true
		}
	}
	return false
}
