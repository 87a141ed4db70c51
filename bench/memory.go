package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// Memory goals.
const (
	goalIdleRSS = 40 << 20 // bytes
	goalPerTurn = 20 << 10 // bytes
)

// measureMemory runs the real worker binary as a child process hosting one
// scripted harness (membench) with `turns` slots, reads its VmRSS idle and
// with `turns` sleeping turns in flight (one per session), then drains it
// (SIGTERM, drain timeout 1 s: the turns end drain_timeout) and checks that
// every turn got its durable result.
func measureMemory(ctx context.Context, f *fleet, turns int, workerBin string) ([]Row, error) {
	dir, err := os.MkdirTemp("", "teamster-bench-worker-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if workerBin == "" {
		workerBin = filepath.Join(dir, "worker")
		if err := goBuild("memory", "github.com/teamster-fleet/teamster/cmd/worker", workerBin); err != nil {
			return nil, fmt.Errorf("%w (or pass -worker-bin)", err)
		}
	}
	cfgPath := filepath.Join(dir, "worker.json")
	cfg := fmt.Sprintf(`{"workerId": %q, "slots": %d, "leaseTtlMs": 10000, "drainTimeoutMs": 1000,
  "harnesses": [{"id": %q, "implementation": "scripted", "pluginId": %q, "autoSelection": {"providerIds": []}, "injection": "v2"}]}`,
		memoryHarnessID, turns, memoryHarnessID, memoryHarnessID)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	logPath := filepath.Join(dir, "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(workerBin, "--config", cfgPath, "--nats-url", f.srv.natsURL, "--redis-url", f.srv.redisURL(),
		"--log-level", "warn", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	reaped := false
	defer func() {
		if !reaped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	fail := func(err error) ([]Row, error) {
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w\nworker log:\n%s", err, tailString(string(log), 2000))
	}
	pid := cmd.Process.Pid
	progress("memory: worker binary running (pid %d); waiting for it in the registry", pid)
	if err := f.waitManifests(map[string]int{memoryHarnessID: 1}, 30*time.Second); err != nil {
		return fail(err)
	}

	time.Sleep(3 * time.Second)
	idle, err := vmRSS(pid)
	if err != nil {
		return fail(err)
	}
	idleM := scrapeMetrics(metricsURL)
	progress("memory: idle VmRSS %.1f MiB; starting %d sleeping turns", float64(idle)/(1<<20), turns)

	var ids sync.Map
	var submitted, failed atomic.Int64
	var firstErr atomic.Value
	work := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				a := pinnedAttempt(fmt.Sprintf("bench:mem:%d", i), memoryHarnessID, `{"script":[{"sleep":600000}]}`)
				a.TimeoutMs = 900_000
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				h, err := f.client.Submit(rctx, a)
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				h.Close() // not following: only the durable result is checked
				ids.Store(h.AttemptID(), true)
				submitted.Add(1)
			}
		}()
	}
	for i := 0; i < turns; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fail(fmt.Errorf("memory: %d submits failed: %v", n, firstErr.Load()))
	}
	progress("memory: %d turns submitted in %s; waiting until all run", turns, time.Since(t0).Round(time.Millisecond))
	deadline := time.Now().Add(120 * time.Second)
	for {
		st, err := workerStatus(ctx, f, memoryHarnessID)
		if err == nil && st.Running >= turns {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("memory: the worker runs %d turns after 120s, want %d (%v)", st.Running, turns, err))
		}
		time.Sleep(250 * time.Millisecond)
	}
	progress("memory: %d turns running after %s; letting RSS settle", turns, time.Since(t0).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	busy, err := vmRSS(pid)
	if err != nil {
		return fail(err)
	}
	hwm, _ := procStatus(pid, "VmHWM")
	busyM := scrapeMetrics(metricsURL)

	progress("memory: VmRSS %.1f MiB with %d turns; draining the worker (SIGTERM)", float64(busy)/(1<<20), turns)
	tDrain := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	var exitErr error
	select {
	case exitErr = <-exited:
		reaped = true
	case <-time.After(120 * time.Second):
		return fail(errors.New("memory: the worker did not exit within 120s of SIGTERM"))
	}
	drained := time.Since(tDrain)
	// Every turn ended drain_timeout; its result is durable.
	held := 0
	if counts, err := durableCounts(ctx, f.client); err == nil {
		ids.Range(func(k, _ any) bool {
			subj, _ := bus.ResultSubject(k.(string))
			if counts[subj] == 1 {
				held++
			}
			return true
		})
	}

	perTurn := float64(busy-idle) / float64(turns)
	goroutines := (busyM["go_goroutines"] - idleM["go_goroutines"]) / float64(turns)
	heap := (busyM["go_memstats_heap_inuse_bytes"] - idleM["go_memstats_heap_inuse_bytes"]) / float64(turns) / 1024
	stack := (busyM["go_memstats_stack_inuse_bytes"] - idleM["go_memstats_stack_inuse_bytes"]) / float64(turns) / 1024
	exit := "exit 0"
	if exitErr != nil {
		exit = exitErr.Error()
	}
	return []Row{
		Row{Scenario: "memory: worker RSS idle", Value: ptr(float64(idle) / (1 << 20)), Unit: "MiB",
			Note: fmt.Sprintf("cmd/worker binary, VmRSS 3 s after registering; heap in use %.1f MiB, %v goroutines",
				idleM["go_memstats_heap_inuse_bytes"]/(1<<20), idleM["go_goroutines"])}.
			withGoal("< 40 MiB", idle < goalIdleRSS),
		Row{Scenario: fmt.Sprintf("memory: worker RSS, %d sleeping turns", turns), Value: ptr(float64(busy) / (1 << 20)), Unit: "MiB",
			Note: fmt.Sprintf("VmHWM %.1f MiB; heap in use %.1f MiB, stacks %.1f MiB, %v goroutines",
				float64(hwm)/(1<<20), busyM["go_memstats_heap_inuse_bytes"]/(1<<20), busyM["go_memstats_stack_inuse_bytes"]/(1<<20), busyM["go_goroutines"])},
		Row{Scenario: "memory: per-turn overhead", Value: ptr(perTurn / 1024), Unit: "KiB/turn",
			Note: fmt.Sprintf("(RSS with turns - RSS idle) / %d; per turn: %.1f goroutines, %.1f KiB heap, %.1f KiB stack; drain after: %s, %s, %d of %d durable results",
				turns, goroutines, heap, stack, drained.Round(time.Millisecond), exit, held, submitted.Load())}.
			withGoal("< 20 KiB", perTurn < goalPerTurn),
	}, nil
}

// workerStatus asks a worker for its status on its control subject.
func workerStatus(ctx context.Context, f *fleet, workerID string) (*bus.WorkerControlReply, error) {
	subj, err := bus.WorkerControlSubject(workerID)
	if err != nil {
		return nil, err
	}
	body, _ := bus.Encode(&bus.WorkerControl{V: bus.Version, Op: bus.ControlStatus})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := f.client.Conn().RequestWithContext(rctx, subj, body)
	if err != nil {
		return &bus.WorkerControlReply{}, err
	}
	var rep bus.WorkerControlReply
	if err := bus.Decode(m.Data, &rep); err != nil {
		return &bus.WorkerControlReply{}, err
	}
	return &rep, nil
}

// vmRSS is a process's resident set size in bytes.
func vmRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// procStatus reads a "kB" field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, err
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}

// scrapeMetrics reads the unlabelled samples of a Prometheus text endpoint;
// empty when it does not answer.
func scrapeMetrics(url string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[k] = f
		}
	}
	return out
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// goBuild builds the package pkg of the module's build list into the binary
// out, for the scenario what.
func goBuild(what, pkg, out string) error {
	progress("%s: go build %s", what, pkg)
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: go build %s (run the bench from the module): %v\n%s", what, pkg, err, b)
	}
	return nil
}
