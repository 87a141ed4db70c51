package harness

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadBlob: whatever the blob, its decoder yields only regular files at
// clean paths inside the root, none larger than the blob.
func FuzzReadBlob(f *testing.F) {
	src := f.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "a"), 0o700); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a", "b.txt"), []byte("b"), 0o600); err != nil {
		f.Fatal(err)
	}
	blob, err := PackFiles(src, []string{"a/b.txt"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(blob)
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := readBlob(b)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.rel != path.Clean(e.rel) || path.IsAbs(e.rel) || e.rel == ".." || strings.HasPrefix(e.rel, "../") {
				t.Fatalf("decoded path %q leaves the root", e.rel)
			}
			if len(e.data) > len(b) {
				t.Fatalf("decoded %d bytes from a blob of %d", len(e.data), len(b))
			}
		}
	})
}
