package monitoring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// A query to evaluate, and where it comes from.
type query struct {
	where, expr string
}

func dashboardQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, p := range loadDashboard(t).allPanels() {
		for _, q := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("panel %q query %s", p.Title, q.RefID), grafanaRanges.Replace(q.Expr)})
		}
	}
	return qs
}

func alertQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, r := range loadRules(t) {
		q, err := alertQuery(r.Expr)
		if err != nil {
			t.Fatalf("alert %s: %v", r.Alert, err)
		}
		qs = append(qs, query{"alert " + r.Alert, q})
	}
	return qs
}

// Every expression of the dashboard and of the alerting rules returns
// series from a real fleet (a router and two workers, in process) that ran
// some traffic, scraped by a real Prometheus with prometheus.yml's jobs;
// Prometheus loads alerts.yml and evaluates every rule without error.
func TestExpressionsReturnSeries(t *testing.T) {
	t.Parallel()
	bin := need(t, "prometheus")
	queries := append(dashboardQueries(t), alertQueries(t)...)
	nAlerts := len(loadRules(t))

	f := fleettest.Start(t, fleettest.Options{Workers: 2, Metrics: true})
	p := startPrometheus(t, bin, f.MetricsURL)
	p.waitTargetsUp(t, len(f.MetricsURL))
	driveTraffic(t, f)

	// Rates need two samples of a series that the traffic created, and
	// rules an evaluation: a few scrape intervals.
	deadline := time.Now().Add(30 * time.Second)
	for {
		failures := p.rulesFailures(nAlerts)
		for _, q := range queries {
			n, err := p.query(q.expr)
			switch {
			case err != nil:
				failures = append(failures, fmt.Sprintf("%s: %s: %v", q.where, q.expr, err))
			case n == 0:
				failures = append(failures, fmt.Sprintf("%s: %s: no series", q.where, q.expr))
			}
		}
		if len(failures) == 0 {
			t.Logf("%d expressions returned series; %d rules evaluated", len(queries), nAlerts)
			return
		}
		if time.Now().After(deadline) {
			for _, f := range failures {
				t.Error(f)
			}
			return
		}
		time.Sleep(time.Second)
	}
}

// awaitScript says "waiting", then waits up to 30 s for injected input.
var awaitScript = fleettest.Script(`{"say":"waiting"}`, `{"awaitInjection":30000}`, `{"say":"done"}`)

// driveTraffic gives the counters and histograms data: two sessions of
// three turns each, submitted back to back so that the later turns wait
// behind the earlier; a turn steered by injected input; a submit rejected
// as invalid and one naming a harness no worker hosts.
func driveTraffic(t *testing.T, f *fleettest.Fleet) {
	t.Helper()
	var hs []*client.Handle
	for _, s := range []string{"monitoring:alice", "monitoring:bob"} {
		for k := 1; k <= 3; k++ {
			hs = append(hs, fleettest.Submit(t, f.Client, fleettest.Attempt(s, fleettest.Script(`{"sleep":100}`, fmt.Sprintf(`{"say":"turn %d"}`, k)))))
		}
	}
	const steered = "monitoring:steered"
	h := fleettest.Submit(t, f.Client, fleettest.Attempt(steered, awaitScript))
	fleettest.WaitEvent(t, h, bus.EventPartial) // the run waits for input
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := f.Client.Inject(ctx, bus.InjectRequest{SessionKey: steered, Text: "also, be brief", AuthorityKind: bus.AuthorityRun})
	if err != nil || rep.Status != bus.StatusAccepted {
		t.Fatalf("inject: %+v %v", rep, err)
	}
	hs = append(hs, h)
	for _, h := range hs {
		if r := fleettest.Result(t, h); r.Status != teamster.StatusOK {
			t.Fatalf("attempt %s: %+v, want ok", h.AttemptID(), r)
		}
	}
	if _, err := f.Client.Submit(ctx, &bus.Attempt{V: bus.Version}); !errors.Is(err, teamster.ErrInvalidRequest) {
		t.Fatalf("an empty attempt: %v, want invalid_request", err)
	}
	ghost := fleettest.Attempt("monitoring:ghost", "hi")
	ghost.AgentHarnessID = "ghost"
	if _, err := f.Client.Submit(ctx, ghost); !errors.Is(err, teamster.ErrHarnessNotRegistered) {
		t.Fatalf("an attempt pinned to an unregistered harness: %v, want harness_not_registered", err)
	}
}

// promServer is a prometheus process the test started.
type promServer struct {
	base string
	log  string // its output
	hc   *http.Client
}

// startPrometheus runs bin with prometheus.yml made to scrape the fleet's
// metrics servers (urls: "router" and the worker ids) every second and to
// load alerts.yml; the process is killed when t ends.
func startPrometheus(t *testing.T, bin string, urls map[string]string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, fleetScrapeConfig(t, urls, rules), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &promServer{base: "http://" + addr, log: filepath.Join(dir, "prometheus.log"), hc: &http.Client{Timeout: 10 * time.Second}}
	out, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		out.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %v\n%s", cmd.ProcessState, p.output())
		default:
		}
		if resp, err := p.hc.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready in 20s:\n%s", p.base, p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *promServer) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// fleetScrapeConfig is prometheus.yml with the fleet's addresses as the
// targets of its router and worker jobs (the other jobs left out), a 1 s
// scrape and evaluation interval, and rules as its rule file.
func fleetScrapeConfig(t *testing.T, urls map[string]string, rules string) []byte {
	t.Helper()
	hostPort := func(u string) string {
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" {
			t.Fatalf("metrics URL %q: %v", u, err)
		}
		return pu.Host
	}
	targets := map[string][]string{}
	for name, u := range urls {
		job := workerJob
		if name == "router" {
			job = routerJob
		}
		targets[job] = append(targets[job], hostPort(u))
	}
	if len(targets[routerJob]) != 1 || len(targets[workerJob]) != 2 {
		t.Fatalf("fleet metrics URLs %v: want a router and two workers", urls)
	}
	b, err := os.ReadFile(scrapeFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", scrapeFile, err)
	}
	global, _ := cfg["global"].(map[string]any)
	if global == nil {
		global = map[string]any{}
	}
	global["scrape_interval"], global["scrape_timeout"], global["evaluation_interval"] = "1s", "1s", "1s"
	cfg["global"] = global
	cfg["rule_files"] = []string{rules}
	jobs, _ := cfg["scrape_configs"].([]any)
	var kept []any
	for _, j := range jobs {
		m, _ := j.(map[string]any)
		name, _ := m["job_name"].(string)
		if ts := targets[name]; len(ts) > 0 {
			m["static_configs"] = []any{map[string]any{"targets": ts}}
			delete(m, "scrape_interval")
			delete(m, "scrape_timeout")
			kept = append(kept, m)
		}
	}
	if len(kept) != 2 {
		t.Fatalf("%s: want jobs %s and %s, have %d of them", scrapeFile, routerJob, workerJob, len(kept))
	}
	cfg["scrape_configs"] = kept
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get decodes the JSON answer of an API path into data, failing unless
// Prometheus says success.
func (p *promServer) get(pathAndQuery string, data any) error {
	resp, err := p.hc.Get(p.base + pathAndQuery)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("HTTP %d: %v", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("HTTP %d: %s: %s", resp.StatusCode, body.ErrorType, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// waitTargetsUp waits until Prometheus has n active targets, all up.
func (p *promServer) waitTargetsUp(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var data struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		err := p.get("/api/v1/targets?state=active", &data)
		up := 0
		var status []string
		for _, tg := range data.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
			status = append(status, fmt.Sprintf("%s %s %s", tg.ScrapeURL, tg.Health, tg.LastError))
		}
		if err == nil && up == n && len(data.ActiveTargets) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("targets not all up in 20s (want %d): %v %v\n%s", n, status, err, p.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// query evaluates an instant query and returns how many series it
// returned.
func (p *promServer) query(expr string) (int, error) {
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query?"+url.Values{"query": {expr}}.Encode(), &data); err != nil {
		return 0, err
	}
	if data.ResultType != "vector" {
		return 0, fmt.Errorf("result type %s, want vector", data.ResultType)
	}
	return len(data.Result), nil
}

// rulesFailures says what is wrong with the rules Prometheus loaded: fewer
// or more alerting rules than alerts.yml has, or one that has not been
// evaluated yet or whose evaluation failed.
func (p *promServer) rulesFailures(want int) []string {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Type      string `json:"type"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules", &data); err != nil {
		return []string{"rules: " + err.Error()}
	}
	var failures []string
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Type != "alerting" || r.Health != "ok" {
				failures = append(failures, fmt.Sprintf("rule %s: type %s health %s %s", r.Name, r.Type, r.Health, r.LastError))
			}
		}
	}
	if n != want {
		failures = append(failures, "prometheus loaded "+strconv.Itoa(n)+" rules, alerts.yml has "+strconv.Itoa(want))
	}
	return failures
}
