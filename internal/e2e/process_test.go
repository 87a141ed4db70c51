package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/worker"
)

// buildBinaries builds cmd/router, internal/testworker (cmd/worker with the
// scripted harness's ledger, a test hook the production worker has no flag
// for) and cmd/teamster once per test binary.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "teamster-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "../../cmd/router", "../../internal/testworker", "../../cmd/teamster")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// proc is a started daemon process.
type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), name), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: &out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return p
}

// The real binaries: cmd/router and two worker processes (cmd/worker's
// command, with the ledger: internal/testworker) against a
// redis-server process and a NATS server on a local port; attempts submitted
// with `teamster submit`, results read with `teamster result`; SIGTERM drains
// a worker and it exits 0.
func TestProcesses(t *testing.T) {
	redisSrv := testenv.NewRedis(t)
	natsSrv := testenv.NewNATS(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.jsonl")
	common := []string{"--nats-url", natsSrv.URL(), "--redis-url", redisSrv.URL(), "--log-format", "json"}

	router := start(t, "router", common...)
	var workers []*proc
	for i := 1; i <= 2; i++ {
		cfg := worker.DevConfig(fmt.Sprintf("pw%d", i), 8)
		cfg.LeaseTTLMs = 2000
		path := filepath.Join(dir, fmt.Sprintf("worker-%d.json", i))
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, start(t, "testworker", append(common, "--config", path, "--ledger", ledger)...))
	}
	_ = router
	teamsterCLI := func(args ...string) (string, int) { return runCLI(t, natsSrv.URL(), args...) }
	// Wait for both workers to register (explain reads the live registry).
	attemptFile := func(name, prompt string) string {
		a := fleettest.Attempt("proc-session", prompt)
		b, _ := json.Marshal(a)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := attemptFile("a1.json", fleettest.Script(`{"sleep":200}`, `{"say":"one"}`))
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, code := teamsterCLI("explain", "-f", first)
		if code == 0 && strings.Contains(out, "selected   codex (auto_plugin)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers never registered:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Three turns of one session, submitted in order, followed as JSON.
	var ids []string
	for i, f := range []string{first, attemptFile("a2.json", "two"), attemptFile("a3.json", fleettest.Script(`{"say":"three"}`))} {
		out, code := teamsterCLI("submit", "-f", f, "--json")
		if code != 0 {
			t.Fatalf("submit %d exited %d:\n%s", i, code, out)
		}
		var rep bus.SubmitReply
		if err := json.Unmarshal([]byte(firstLine(out)), &rep); err != nil || rep.Status != bus.StatusAccepted {
			t.Fatalf("submit %d reply %q: %v", i, out, err)
		}
		ids = append(ids, rep.AttemptID)
	}
	for i, id := range ids {
		out, code := teamsterCLI("result", id, "--wait", "60s", "--json")
		if code != 0 {
			t.Fatalf("result %s exited %d:\n%s", id, code, out)
		}
		var r bus.Result
		if err := json.Unmarshal([]byte(firstLine(out)), &r); err != nil {
			t.Fatalf("result output %q: %v", out, err)
		}
		want := []string{"one", "two", "three"}[i]
		if r.Status != teamster.StatusOK || len(r.AssistantTexts) != 1 || r.AssistantTexts[0] != want {
			t.Fatalf("result of turn %d: %+v", i+1, r)
		}
	}
	// --follow streams the events and ends with the result.
	out, code := teamsterCLI("submit", "-f", attemptFile("a4.json", fleettest.Script(`{"say":"followed"}`)), "--follow", "--json")
	if code != 0 || !strings.Contains(out, `"type":"claimed"`) || !strings.Contains(out, `"type":"result"`) {
		t.Fatalf("submit --follow exited %d:\n%s", code, out)
	}
	// A failing result exits 2.
	if out, code := teamsterCLI("submit", "-f", attemptFile("a5.json", fleettest.Script(`{"fail":"no"}`)), "--follow"); code != 2 || !strings.Contains(out, "harness_failed") {
		t.Fatalf("failing attempt exited %d:\n%s", code, out)
	}
	// The ledger the worker processes wrote: in order, no overlap, no replay.
	entries, err := scripted.ReadLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if err := scripted.CheckLedger(entries); err != nil {
		t.Fatal(err)
	}
	if err := scripted.CheckReplays(entries); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range entries {
		if e.Event == scripted.EventStart && len(order) < 3 {
			order = append(order, e.Attempt)
		}
	}
	if fmt.Sprint(order) != fmt.Sprint(ids) {
		t.Fatalf("turns ran %v, submitted %v", order, ids)
	}
	// `teamster status` shows both workers.
	if out, code := teamsterCLI("status", "--redis-url", redisSrv.URL()); code != 0 || !strings.Contains(out, "pw1") || !strings.Contains(out, "pw2") || !strings.Contains(out, "active") {
		t.Fatalf("status exited %d:\n%s", code, out)
	}
	// Every binary says its version, and each worker's registry entry (and
	// so `teamster status`) carries the version the worker says.
	versionOf := func(name string) string {
		out, err := exec.Command(filepath.Join(binaries(t), name), "--version").CombinedOutput()
		fields := strings.Fields(string(out))
		if err != nil || len(fields) != 4 || fields[1] != "version" || fields[2] == "" {
			t.Fatalf("%s --version: %v\n%s", name, err, out)
		}
		return fields[2]
	}
	workerVersion := versionOf("testworker")
	for _, name := range []string{"router", "teamster"} {
		if v := versionOf(name); v != workerVersion {
			t.Fatalf("%s --version says %s, the worker %s: one build", name, v, workerVersion)
		}
	}
	if out, code := teamsterCLI("version"); code != 0 || !strings.HasPrefix(out, "teamster version "+workerVersion+" (go") {
		t.Fatalf("teamster version exited %d:\n%s", code, out)
	}
	out, code = teamsterCLI("status", "--redis-url", redisSrv.URL(), "--json")
	var st struct {
		Workers []struct {
			WorkerID, Version string
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Workers) != 2 {
		t.Fatalf("status --json exited %d (%v):\n%s", code, err, out)
	}
	for _, w := range st.Workers {
		if w.Version != workerVersion {
			t.Fatalf("worker %s registers version %q, want %q", w.WorkerID, w.Version, workerVersion)
		}
	}
	// `result --wait D` waits D, not the CLI's own budget, and says that
	// no result came; an unknown subcommand fails instead of printing help.
	began := time.Now()
	out, code = teamsterCLI("result", "01M8ZZZZZZZZZZZZZZZZZZZZZZ", "--wait", "1s")
	if took := time.Since(began); code != 1 || !strings.Contains(out, "no result for 01M8ZZZZZZZZZZZZZZZZZZZZZZ within 1s") || took > 8*time.Second {
		t.Fatalf("result --wait 1s of an unknown attempt exited %d after %s:\n%s", code, took, out)
	}
	if out, code := teamsterCLI("session", "frobnicate", "agent:main:x"); code != 1 || !strings.Contains(out, `unknown command "frobnicate"`) {
		t.Fatalf("session frobnicate exited %d:\n%s", code, out)
	}
	// `teamster drain --wait` drains worker 1 through its control subject;
	// SIGTERM drains worker 2. Both processes exit 0.
	if out, code := teamsterCLI("drain", "pw1", "--wait"); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("drain --wait exited %d:\n%s", code, out)
	}
	_ = workers[1].cmd.Process.Signal(syscall.SIGTERM)
	for i, w := range workers {
		select {
		case err := <-w.done:
			if err != nil {
				t.Fatalf("worker %d exited with %v:\n%s", i+1, err, w.out)
			}
			w.done <- nil
		case <-time.After(30 * time.Second):
			t.Fatalf("worker %d did not exit", i+1)
		}
	}
}

// A second SIGTERM stops a draining worker process without waiting for its
// runs: the running turn, which would sleep for a minute, is cancelled with
// drain_timeout and answered, and the process exits 1 long before the drain
// timeout.
func TestASecondSignalStopsAWorkerWithoutWaitingForItsRuns(t *testing.T) {
	redisSrv := testenv.NewRedis(t)
	natsSrv := testenv.NewNATS(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.jsonl")
	common := []string{"--nats-url", natsSrv.URL(), "--redis-url", redisSrv.URL(), "--log-format", "json"}
	start(t, "router", common...)
	cfg := worker.DevConfig("sw1", 4)
	cfg.DrainTimeoutMs = 120_000
	path := filepath.Join(dir, "worker.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	w := start(t, "testworker", append(common, "--config", path, "--ledger", ledger)...)

	a := fleettest.Attempt("stop-session", fleettest.Script(`{"sleep":60000}`, `{"say":"never"}`))
	body, _ := json.Marshal(a)
	attemptPath := filepath.Join(dir, "a.json")
	if err := os.WriteFile(attemptPath, body, 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, int) { return runCLI(t, natsSrv.URL(), args...) }
	var id string
	deadline := time.Now().Add(30 * time.Second)
	for id == "" {
		out, code := cli("submit", "-f", attemptPath, "--json")
		var rep bus.SubmitReply
		if code == 0 && json.Unmarshal([]byte(firstLine(out)), &rep) == nil && rep.Status == bus.StatusAccepted {
			id = rep.AttemptID
		} else if time.Now().After(deadline) {
			t.Fatalf("submit never accepted (the worker never registered?): exit %d\n%s", code, out)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Wait until the turn runs: the scripted harness has recorded its start.
	for {
		entries, _ := scripted.ReadLedger(ledger)
		if slices.ContainsFunc(entries, func(e scripted.Entry) bool { return e.Event == scripted.EventStart }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the turn never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond) // the drain waits for the turn
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("worker exited with %v after a second signal, want exit status 1:\n%s", err, w.out)
		}
		w.done <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("worker still running 30s after a second signal:\n%s", w.out)
	}
	out, code := cli("result", id, "--wait", "30s", "--json")
	var r bus.Result
	if err := json.Unmarshal([]byte(firstLine(out)), &r); err != nil {
		t.Fatalf("result exited %d, output %q: %v", code, out, err)
	}
	if r.Status != teamster.StatusCancelled || r.Error == nil || r.Error.Code != teamster.CodeDrainTimeout {
		t.Fatalf("result of the stopped turn: %+v, want cancelled with drain_timeout", r)
	}
}

// runCLI runs the teamster CLI against the NATS server at natsURL and
// returns its combined output and exit status.
func runCLI(t *testing.T, natsURL string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "teamster"), append(args, "--nats-url", natsURL)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func firstLine(s string) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if sc.Scan() {
		return sc.Text()
	}
	return ""
}
