package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// StateCarrier is a harness whose native binding needs local files to be
// resumed: Codex's rollout of a thread, Claude's transcript of a session.
// The worker saves a session's native state after each successful turn, under
// the turn's fence, to the fleet's object store, and restores it on whichever
// worker claims the session's next turn, before RunAttempt; so a session's
// thread follows it across machines that share no disk.
type StateCarrier interface {
	// ExportState returns, after a successful turn, what a worker that
	// never ran the session needs to resume binding (the turn's
	// NativeSession), as one blob (PackFiles makes one). A harness that has
	// no state for binding returns nil.
	ExportState(ctx context.Context, binding json.RawMessage) ([]byte, error)
	// ImportState installs blob, which ExportState returned for binding on
	// this or another worker, before the session's next turn. It replaces
	// the harness's local copy of that state.
	ImportState(ctx context.Context, binding json.RawMessage, blob []byte) error
}

// PackFiles packs the regular files at the given paths, each relative to
// root and slash-separated, into one blob (a tar stream) that UnpackFiles
// writes back under another root. A path outside root, a missing file or
// one that is not a regular file is an error. The worker bounds the blob
// (maxNativeStateBytes).
func PackFiles(root string, rels []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, rel := range rels {
		clean, err := cleanRel(rel)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(root, filepath.FromSlash(clean))
		st, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("native state: %s is not a regular file", p)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: clean, Mode: 0o600,
			Size: st.Size(), ModTime: st.ModTime(), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		// A file that grows while it is read is cut at the size in the
		// header: the state is what the turn left when it ended.
		_, err = io.CopyN(tw, f, st.Size())
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("native state: read %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// UnpackFiles writes the files of a PackFiles blob under root, creating
// directories (0700) as needed and replacing files that exist; it returns
// their slash-separated paths relative to root. Entries other than regular
// files, paths that would leave root (absolute, "..", or through a symbolic
// link already under root), and paths that accept (when not nil) refuses
// are refused before anything is written.
func UnpackFiles(root string, blob []byte, accept func(rel string) error) ([]string, error) {
	entries, err := readBlob(blob)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if accept != nil {
			if err := accept(e.rel); err != nil {
				return nil, err
			}
		}
		if err := noLinkOnPath(root, e.rel); err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		p := filepath.Join(root, filepath.FromSlash(e.rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		// Write beside, then rename: a reader never sees half a file.
		tmp := p + ".teamster-restore"
		if err := os.WriteFile(tmp, e.data, 0o600); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, p); err != nil {
			os.Remove(tmp)
			return nil, err
		}
		out = append(out, e.rel)
	}
	return out, nil
}

// blobEntry is one file of a state blob: its clean relative path and its
// content.
type blobEntry struct {
	rel  string
	data []byte
}

// readBlob decodes a PackFiles blob, refusing anything but regular files at
// clean relative paths. It touches no disk (FuzzReadBlob).
func readBlob(blob []byte) ([]blobEntry, error) {
	var entries []blobEntry
	tr := tar.NewReader(bytes.NewReader(blob))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries, nil
		}
		if err != nil {
			return nil, fmt.Errorf("native state: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("native state: %q is not a regular file", h.Name)
		}
		clean, err := cleanRel(h.Name)
		if err != nil {
			return nil, err
		}
		// The blob is not compressed, so no file in it is larger than the
		// blob: a header that says otherwise (a sparse entry, whose holes
		// read as zeros) is refused before anything is read.
		if h.Size < 0 || h.Size > int64(len(blob)) {
			return nil, fmt.Errorf("native state: %q claims %d bytes in a blob of %d", h.Name, h.Size, len(blob))
		}
		data, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			return nil, fmt.Errorf("native state: %w", err)
		}
		entries = append(entries, blobEntry{clean, data})
	}
}

func cleanRel(rel string) (string, error) {
	clean := path.Clean(rel)
	if rel == "" || path.IsAbs(rel) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains(rel, `\`) {
		return "", fmt.Errorf("native state: path %q is not inside the state's root", rel)
	}
	return clean, nil
}

// noLinkOnPath refuses a path whose existing parts under root include a
// symbolic link (which could point outside root).
func noLinkOnPath(root, rel string) error {
	p := root
	for part := range strings.SplitSeq(rel, "/") {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("native state: %s is a symbolic link; refusing to write through it", p)
		}
	}
	return nil
}
