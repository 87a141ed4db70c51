package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// measureResultsMemory answers a sizing question no goal asks: what one
// retained result costs nats-server. TEAMSTER_RESULTS keeps one subject per
// attempt for 24 h (docs/PROTOCOL.md), and the server keeps state per subject, so
// its memory grows with attempts/s × 24 h. The scenario runs a real
// nats-server binary (its own process, so nothing else shares its heap),
// creates TEAMSTER_RESULTS as routers do, publishes n echo results, one per
// subject, and reads the server's heap in use after a forced GC (its pprof
// endpoint) and its VmRSS, before and after. Each result's Nats-Msg-Id is
// still inside the 2-minute duplicate window when it is measured, so the
// figure includes that entry.
func measureResultsMemory(ctx context.Context, n int) ([]Row, error) {
	dir, err := os.MkdirTemp("", "teamster-bench-results-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "nats-server")
	if err := goBuild("results memory", "github.com/nats-io/nats-server/v2", bin); err != nil {
		return nil, err
	}
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	profPort, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("max_payload: 8MB\n"), 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "-c", conf, "-js", "-sd", filepath.Join(dir, "jetstream"), "-a", "127.0.0.1",
		"-p", strconv.Itoa(port), "--profile", strconv.Itoa(profPort))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	for deadline := time.Now().Add(30 * time.Second); ; {
		if nc, err = nats.Connect(url); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("results memory: nats-server did not come up: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, bus.ResultsStreamConfig(bus.StreamOptions{})); err != nil {
		return nil, err
	}
	prof := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1&debug=1", profPort)
	// sample reads the server's heap in use (after a forced GC) and VmRSS.
	sample := func() (heap, rss int64, err error) {
		if heap, err = heapInUse(ctx, prof); err != nil {
			return 0, 0, err
		}
		rss, err = vmRSS(cmd.Process.Pid)
		return heap, rss, err
	}
	heap0, rss0, err := sample()
	if err != nil {
		return nil, err
	}

	progress("results memory: publishing %d results, one subject each", n)
	res := &bus.Result{V: bus.Version, Status: teamster.StatusOK, HarnessID: "codex", WorkerID: "w1",
		Fence: "550e4757df98ef8a:12", AssistantTexts: []string{"hello"}}
	started := time.Now()
	for i := range n {
		id := fmt.Sprintf("01BENCHRESULTSMEM%09d", i)
		res.AttemptID = id
		body, err := bus.Encode(res)
		if err != nil {
			return nil, err
		}
		subj, _ := bus.ResultSubject(id)
		m := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}
		m.Header.Set(bus.HeaderMsgID, bus.ResultMsgID(id))
		if _, err := js.PublishMsgAsync(m, jetstream.WithExpectStream(bus.StreamResults)); err != nil {
			return nil, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("results memory: %d publishes not acknowledged after 2 minutes", js.PublishAsyncPending())
	}
	took := time.Since(started)
	info, err := js.Stream(ctx, bus.StreamResults)
	if err != nil {
		return nil, err
	}
	st := info.CachedInfo().State
	if st.Msgs != uint64(n) {
		return nil, fmt.Errorf("results memory: the stream holds %d messages, want %d", st.Msgs, n)
	}
	// Let the file store drop its block caches (they expire after a few
	// seconds idle), so what stays is what a retained result costs.
	progress("results memory: %d results stored in %s; waiting for the block caches to expire", n, took.Round(time.Millisecond))
	time.Sleep(15 * time.Second)
	heap1, rss1, err := sample()
	if err != nil {
		return nil, err
	}
	// Then past the duplicate window, when only what lasts for the stream's
	// 24 h is left.
	progress("results memory: heap %.0f bytes per result with the duplicate window; waiting %s for it to pass",
		float64(heap1-heap0)/float64(n), bus.DuplicateWindow+10*time.Second)
	time.Sleep(bus.DuplicateWindow + 10*time.Second)
	heap2, rss2, err := sample()
	if err != nil {
		return nil, err
	}
	per := func(after, before int64) float64 { return float64(after-before) / float64(n) }
	return []Row{
		{Scenario: "nats-server: heap per retained result", Value: ptr(per(heap2, heap0)), Unit: "bytes",
			Note: fmt.Sprintf("%d echo results on TEAMSTER_RESULTS, one subject each, in a nats-server process, past the 2-minute duplicate window; heap in use after a forced GC %.1f → %.1f MiB (%.0f bytes per result while their Nats-Msg-Ids were in the window); VmRSS %.1f → %.1f MiB (%.0f bytes per result; %.0f in the window); stream bytes on disk %.0f per result",
				n, float64(heap0)/(1<<20), float64(heap2)/(1<<20), per(heap1, heap0),
				float64(rss0)/(1<<20), float64(rss2)/(1<<20), per(rss2, rss0), per(rss1, rss0), float64(st.Bytes)/float64(n))},
	}, nil
}

// heapInUse reads HeapInuse from a Go process's pprof heap page (gc=1 runs
// a collection first).
func heapInUse(ctx context.Context, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("nats-server profile: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("nats-server profile: no HeapInuse in %s", url)
}
