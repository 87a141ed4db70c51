package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
)

// registryEntry reads a worker's registry entry; nil when it has none.
func registryEntry(t *testing.T, f *fleettest.Fleet, id string) *bus.WorkerEntry {
	t.Helper()
	js, err := jetstream.New(f.Connect("registry-reader"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := bus.ReadRegistry(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.WorkerID == id {
			return &e
		}
	}
	return nil
}

// controlDrain sends drain on the worker's control subject.
func controlDrain(t *testing.T, f *fleettest.Fleet, id string) *bus.WorkerControlReply {
	t.Helper()
	subj, _ := bus.WorkerControlSubject(id)
	msg, err := f.Connect("operator").Request(subj, []byte(`{"v":1,"op":"drain"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep bus.WorkerControlReply
	if err := bus.Decode(msg.Data, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// A drained worker claims nothing more (new attempts go to the others), lets
// its running turns finish ok, releases its leases, shows draining in the
// registry and then leaves it.
func TestDrainLetsRunningTurnsFinish(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 3})
	var long []*client.Handle
	for i := 0; i < 6; i++ {
		long = append(long, submit(t, f, fleettest.Attempt(fmt.Sprintf("drain-long-%d", i), fleettest.Script(`{"sleep":1500}`, `{"say":"finished"}`))))
	}
	// Pick a worker that runs at least one of them.
	var target string
	for _, h := range long {
		var cd bus.ClaimedData
		mustJSON(t, waitEvent(t, h, bus.EventClaimed).Data, &cd)
		target = cd.WorkerID
	}
	w := f.Worker(target)
	running := w.InFlight()
	if running == 0 {
		t.Fatal("the chosen worker runs nothing")
	}
	rep := controlDrain(t, f, target)
	if rep.Status != bus.StatusOK || rep.State != bus.WorkerDraining || rep.Running != running {
		t.Fatalf("drain reply %+v, want draining with %d running", rep, running)
	}
	if e := registryEntry(t, f, target); e == nil || e.State != bus.WorkerDraining {
		// The registry is updated on the next heartbeat after the drain.
		deadline := time.Now().Add(waitTimeout)
		for e == nil || e.State != bus.WorkerDraining {
			if time.Now().After(deadline) {
				t.Fatalf("registry entry %+v, want draining", e)
			}
			time.Sleep(50 * time.Millisecond)
			e = registryEntry(t, f, target)
		}
	}
	// New attempts go to the other workers.
	var fresh []*client.Handle
	for i := 0; i < 12; i++ {
		fresh = append(fresh, submit(t, f, fleettest.Attempt(fmt.Sprintf("drain-new-%d", i), "after the drain began")))
	}
	for _, h := range fresh {
		if r := result(t, h); r.Status != teamster.StatusOK || r.WorkerID == target {
			t.Fatalf("new attempt %+v ran on the draining worker", r)
		}
	}
	for _, h := range long {
		if r := result(t, h); r.Status != teamster.StatusOK {
			t.Fatalf("running turn ended %+v, want ok", r)
		}
	}
	select {
	case <-w.Done():
	case <-time.After(waitTimeout):
		t.Fatal("the drained worker did not stop")
	}
	if e := registryEntry(t, f, target); e != nil {
		t.Fatalf("the drained worker is still in the registry: %+v", e)
	}
	held, shown, err := leases.NewStore(f.RDB).Leases(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range shown {
		if l.Holder == target {
			t.Fatalf("the drained worker still holds a lease (%d held): %+v", held, l)
		}
	}
}

// With a short drain timeout, the turns still running end drain_timeout,
// each with exactly one result.
func TestDrainTimeoutCancelsRemainingTurns(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1, DrainTimeout: 300 * time.Millisecond})
	var hs []*client.Handle
	for i := 0; i < 3; i++ {
		h := submit(t, f, fleettest.Attempt(fmt.Sprintf("dt-%d", i), fleettest.Script(`{"sleep":60000}`)))
		waitEvent(t, h, bus.EventClaimed)
		hs = append(hs, h)
	}
	controlDrain(t, f, "w1")
	for _, h := range hs {
		r := result(t, h)
		if r.Status != teamster.StatusCancelled || r.Error.Code != teamster.CodeDrainTimeout {
			t.Fatalf("result %+v, want drain_timeout", r)
		}
		n := 0
		for e := range h.Events() {
			if e.Type == bus.EventResult {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d result events", n)
		}
	}
	select {
	case <-f.Worker("w1").Done():
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not stop")
	}
}

// Rolling restart under load: three workers drained and restarted one after
// another while attempts keep arriving; nothing is lost, duplicated or run
// twice, and every session's turns stay in order.
func TestRollingRestartUnderLoad(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 3})
	const sessions, turns = 40, 8
	var mu sync.Mutex
	accepted := map[string][]string{}
	var handles []*client.Handle
	var wg sync.WaitGroup
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			session := fmt.Sprintf("rolling-%02d", s)
			for k := 0; k < turns; k++ {
				h, err := f.Client.Submit(t.Context(), fleettest.Attempt(session, fleettest.Script(fmt.Sprintf(`{"sleep":%d}`, 20+s%5*10), `{"say":"ok"}`)))
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				mu.Lock()
				accepted[session] = append(accepted[session], h.AttemptID())
				handles = append(handles, h)
				mu.Unlock()
				time.Sleep(time.Duration(50+s%7*10) * time.Millisecond)
			}
		}(s)
	}
	// Roll: drain each worker in turn, wait for it to stop, start its
	// replacement.
	for _, id := range []string{"w1", "w2", "w3"} {
		time.Sleep(200 * time.Millisecond)
		w := f.Worker(id)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		if err := w.Drain(ctx); err != nil {
			cancel()
			t.Fatalf("drain %s: %v", id, err)
		}
		cancel()
		f.StartWorker(id + "-next")
	}
	wg.Wait()
	for _, h := range handles {
		if h.Reply.Status != bus.StatusAccepted {
			t.Fatalf("submit reply %+v %+v", h.Reply, h.Reply.Selection)
		}
		if r := result(t, h); r.Status != teamster.StatusOK {
			t.Fatalf("attempt %s: %+v", h.AttemptID(), r)
		}
	}
	entries := f.Ledger.Entries()
	if err := scripted.CheckLedger(entries); err != nil {
		t.Fatal(err)
	}
	if err := scripted.CheckReplays(entries); err != nil {
		t.Fatal(err)
	}
	if err := scripted.CheckSteps(entries); err != nil {
		t.Fatal(err)
	}
	checkRunOrder(t, entries, accepted)
	if len(handles) != sessions*turns {
		t.Fatalf("%d attempts, want %d", len(handles), sessions*turns)
	}
}

// scrape reads one counter or gauge value from a metrics endpoint; 0 when the
// series does not exist yet.
func scrape(t *testing.T, base, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	fam, ok := families[name]
	if !ok {
		return 0
	}
next:
	for _, m := range fam.Metric {
		for k, v := range labels {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}

func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /metrics counters move for a submitted, a rejected and a finished attempt;
// /readyz turns unready when Redis stops.
func TestMetricsAndReadiness(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1, Metrics: true})
	router, worker := f.MetricsURL["router"], f.MetricsURL["w1"]
	accepted := map[string]string{"status": "accepted"}
	before := scrape(t, router, "teamster_router_attempts_submitted_total", accepted)
	r := result(t, submit(t, f, fleettest.Attempt("metrics", "count me")))
	if r.Status != teamster.StatusOK {
		t.Fatal(r)
	}
	if got := scrape(t, router, "teamster_router_attempts_submitted_total", accepted); got != before+1 {
		t.Fatalf("submitted{accepted} %v, want %v", got, before+1)
	}
	if _, err := f.Client.Submit(t.Context(), &bus.Attempt{V: 1}); !errors.Is(err, teamster.ErrInvalidRequest) {
		t.Fatalf("bad submit: %v", err)
	}
	if got := scrape(t, router, "teamster_router_attempts_rejected_total", map[string]string{"code": "invalid_request"}); got != 1 {
		t.Fatalf("rejected{invalid_request} %v, want 1", got)
	}
	if got := scrape(t, worker, "teamster_worker_attempts_finished_total", map[string]string{"harness": "codex", "status": "ok"}); got != 1 {
		t.Fatalf("finished{codex,ok} %v, want 1", got)
	}
	if got := scrape(t, worker, "teamster_worker_attempts_claimed_total", map[string]string{"harness": "codex"}); got != 1 {
		t.Fatalf("claimed{codex} %v, want 1", got)
	}
	if got := scrape(t, worker, "teamster_worker_run_duration_seconds", map[string]string{"harness": "codex"}); got != 1 {
		t.Fatalf("run duration observations %v, want 1", got)
	}
	if got := scrape(t, worker, "teamster_worker_state", map[string]string{"state": "active"}); got != 1 {
		t.Fatalf("state{active} %v", got)
	}
	for _, base := range []string{router, worker} {
		if code, body := readyz(t, base); code != http.StatusOK {
			t.Fatalf("%s/readyz %d %s", base, code, body)
		}
	}
	if err := f.Redis.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{router, worker} {
		if code, body := readyz(t, base); code != http.StatusServiceUnavailable || !strings.Contains(body, "redis") {
			t.Fatalf("%s/readyz with Redis stopped: %d %q, want 503 naming redis", base, code, body)
		}
	}
	resp, err := http.Get(worker + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz %v %v", resp, err)
	}
	resp.Body.Close()
}
