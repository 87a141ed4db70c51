package harness_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster/harness"
)

func writeFile(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPackAndUnpackFiles(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	writeFile(t, src, "sessions/2026/12/03/rollout-a.jsonl", "one\ntwo\n")
	writeFile(t, src, "top.json", "{}")
	blob, err := harness.PackFiles(src, []string{"sessions/2026/12/03/rollout-a.jsonl", "top.json"})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, "top.json", "old") // replaced
	got, err := harness.UnpackFiles(dst, blob, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sessions/2026/12/03/rollout-a.jsonl", "top.json"}; !slices.Equal(got, want) {
		t.Fatalf("unpacked %q, want %q", got, want)
	}
	for rel, want := range map[string]string{"sessions/2026/12/03/rollout-a.jsonl": "one\ntwo\n", "top.json": "{}"} {
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || string(b) != want {
			t.Fatalf("%s: %q (%v), want %q", rel, b, err, want)
		}
	}
}

func TestPackFilesRefuses(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "a.txt", "a")
	if err := os.Symlink(filepath.Join(root, "a.txt"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rels []string
		want string
	}{
		{"outside the root", []string{"../x"}, "not inside"},
		{"absolute", []string{"/etc/passwd"}, "not inside"},
		{"missing", []string{"nope.txt"}, "no such file"},
		{"a symbolic link", []string{"link"}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := harness.PackFiles(root, tc.rels)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A path the harness's accept refuses is refused before anything is
// written, as a harness's ImportState uses it.
func TestUnpackFilesAsksAccept(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	writeFile(t, src, "sessions/ok.jsonl", "ok")
	writeFile(t, src, "config.toml", "evil")
	blob, err := harness.PackFiles(src, []string{"sessions/ok.jsonl", "config.toml"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = harness.UnpackFiles(dst, blob, func(rel string) error {
		if !strings.HasPrefix(rel, "sessions/") {
			return errors.New("outside sessions/")
		}
		return nil
	})
	if err == nil {
		t.Fatal("a refused path was unpacked")
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 0 {
		t.Fatalf("a refused blob wrote %v", entries)
	}
}

// A blob never writes outside its root: not through "..", not through a
// symbolic link already under the root; and a refused blob writes nothing.
func TestUnpackFilesStaysInsideTheRoot(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeFile(t, src, "escape/x.txt", "x")
	writeFile(t, src, "fine.txt", "fine")
	blob, err := harness.PackFiles(src, []string{"fine.txt", "escape/x.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.UnpackFiles(root, blob, nil); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("unpack through a link: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file was written outside the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "fine.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused blob wrote fine.txt: %v", err)
	}
}
