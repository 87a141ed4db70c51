package natsproc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary is the path of the nats-server binary the nodes run: $EnvBinary
// when set, else the nats-server of this module's go.mod, built once per
// process with `go build` run in the module's root. The build goes to the
// user's cache directory (teamster/natsproc), named by its content's hash,
// so processes that build the same server share one file and never write
// over a binary another one runs; the go build cache makes every build
// after the first take about a second.
func Binary() (string, error) {
	binOnce.Do(func() { binPath, binErr = binary() })
	return binPath, binErr
}

func binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "teamster", "natsproc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-o", tmp.Name(), "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("natsproc: go build nats-server in %s: %v\n%s", root, err, out)
	}
	f, err := os.Open(tmp.Name())
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, "nats-server-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", err
	}
	return final, nil
}

// moduleRoot is the directory of the teamster module's go.mod: the one `go
// env GOMOD` names from the working directory (a test's package directory,
// or wherever `go run ./chaos` runs), else the one this source file is in.
func moduleRoot() (string, error) {
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		gomod := strings.TrimSpace(string(out))
		if gomod != "" && gomod != os.DevNull && isTeamster(gomod) {
			return filepath.Dir(gomod), nil
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if isTeamster(filepath.Join(root, "go.mod")) {
			return root, nil
		}
	}
	return "", fmt.Errorf("natsproc: cannot find the teamster module to build nats-server in (run inside it, or set %s)", EnvBinary)
}

func isTeamster(gomod string) bool {
	b, err := os.ReadFile(gomod)
	return err == nil && strings.HasPrefix(string(b), "module github.com/teamster-fleet/teamster\n")
}
