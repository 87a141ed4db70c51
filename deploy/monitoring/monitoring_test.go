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
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// The scrape jobs of prometheus.yml that alerts.yml and the dashboard
// select on.
const (
	routerJob = "teamster-router"
	workerJob = "teamster-worker"
)

const (
	rulesFile     = "alerts.yml"
	scrapeFile    = "prometheus.yml"
	dashboardFile = "teamster-dashboard.json"
	composeFile   = "../compose/compose.yaml"
)

// grafanaRanges stands a concrete range in for Grafana's interval
// variables, as Grafana would before sending a query.
var grafanaRanges = strings.NewReplacer(
	"${__rate_interval}", "1m", "$__rate_interval", "1m",
	"${__interval}", "1m", "$__interval", "1m",
	"${__range}", "1m", "$__range", "1m",
)

// need finds bin on PATH or fails the test: these tests check the assets
// with the real tools, which make deps installs (Debian's prometheus
// package).
func need(t *testing.T, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("%s: %v; make deps installs it (Debian package prometheus)", bin, err)
	}
	return p
}

// promtool's own checks of the rules and of the compose scrape config. The
// config check needs no name to resolve: it reads the targets without
// dialling them, and it checks the rule files it names too.
func TestPromtool(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"check", "config", scrapeFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// --- alerts.yml ---

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return rules
}

// comparisonRe splits `<query> <op> <number>`.
var comparisonRe = regexp.MustCompile(`^(?s)\s*(.*\S)\s*(==|!=|>=|<=|>|<)\s*([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*$`)

// topLevelOpRe finds a comparison or set operator outside parentheses,
// braces, brackets and strings.
var topLevelOpRe = regexp.MustCompile(`==|!=|>=|<=|[<>]|\b(?:and|or|unless|bool)\b`)

// topLevel blanks out everything of q inside parentheses, braces, brackets
// and quotes, keeping what PromQL sees at the outermost level.
func topLevel(q string) string {
	var b strings.Builder
	depth := 0
	var quote rune
	escaped := false
	for _, r := range q {
		switch {
		case quote != 0:
			if escaped {
				escaped = false
			} else if r == '\\' && quote != '`' {
				escaped = true
			} else if r == quote {
				quote = 0
			}
			r = ' '
		case r == '"' || r == '\'' || r == '`':
			quote, r = r, ' '
		case r == '(' || r == '{' || r == '[':
			depth++
			r = ' '
		case r == ')' || r == '}' || r == ']':
			depth--
			r = ' '
		case depth > 0:
			r = ' '
		}
		b.WriteRune(r)
	}
	return b.String()
}

// alertQuery turns an alert's `<query> <op> <number>` into `<query> <op>
// bool <number>`, which returns the query's series whether or not the alert
// fires.
func alertQuery(expr string) (string, error) {
	m := comparisonRe.FindStringSubmatch(expr)
	if m == nil {
		return "", errors.New("not of the form <query> <comparison> <number>")
	}
	q, op, n := m[1], m[2], m[3]
	if top := topLevel(q); topLevelOpRe.MatchString(top) {
		return "", fmt.Errorf("the query before the last %s has a comparison or set operator at its top level (%q): make it one query compared with one number", op, strings.Join(strings.Fields(top), " "))
	}
	return q + " " + op + " bool " + n, nil
}

// Every rule is an alert with a severity, a summary and a description, and
// an expr the fleet test can evaluate.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	rules := loadRules(t)
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" {
			t.Errorf("rule %q (record %q) is not an alert", r.Expr, r.Record)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s is defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		if _, err := alertQuery(r.Expr); err != nil {
			t.Errorf("%s: expr %q: %v", r.Alert, r.Expr, err)
		}
	}
}

func TestAlertQuery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ expr, want string }{
		{`up{job=~"a|b"} == 0`, `up{job=~"a|b"} == bool 0`},
		{`(sum(up{job="r"}) or vector(0)) < 1`, `(sum(up{job="r"}) or vector(0)) < bool 1`},
		{"sum(rate(x[5m])) / sum(rate(y[5m])) >= 0.25", "sum(rate(x[5m])) / sum(rate(y[5m])) >= bool 0.25"},
		{`count(count by (digest) (p)) > 1`, `count(count by (digest) (p)) > bool 1`},
		{`x{a="<1"} != -1e3`, `x{a="<1"} != bool -1e3`},
	} {
		got, err := alertQuery(c.expr)
		if err != nil || got != c.want {
			t.Errorf("alertQuery(%q) = %q, %v; want %q", c.expr, got, err, c.want)
		}
	}
	for _, expr := range []string{
		`sum(x > 1)`,
		`x > 1 and y > 2`,
		`x > 1 < 2`,
		`x > bool 1`,
		`x > y`,
		`x`,
	} {
		if got, err := alertQuery(expr); err == nil {
			t.Errorf("alertQuery(%q) = %q, want an error", expr, got)
		}
	}
}

// --- teamster-dashboard.json ---

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name    string `json:"name"`
			Type    string `json:"type"`
			Query   string `json:"query"`
			Current struct {
				Value string `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return &d
}

// allPanels lists the dashboard's panels, those nested in rows included.
func (d *dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// The dashboard's datasource is the variable ${datasource} (defaulting to
// the provisioned uid "prometheus"), on every panel and query; every panel
// but a row has a query, and every query uses no variable the fleet test
// cannot stand a value in for.
func TestDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: want both", d.UID, d.Title)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if v.Name == "datasource" && (v.Type != "datasource" || v.Query != "prometheus") {
			t.Errorf("variable datasource: type %q query %q, want a datasource variable of type prometheus", v.Type, v.Query)
		}
	}
	if !slices.Equal(vars, []string{"datasource"}) {
		t.Errorf("template variables %v, want [datasource]", vars)
	}
	want := datasource{Type: "prometheus", UID: "${datasource}"}
	ids := map[int]string{}
	for _, p := range d.allPanels() {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != want {
			t.Errorf("panel %q: datasource %+v, want %+v", p.Title, p.Datasource, want)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Datasource == nil || *q.Datasource != want {
				t.Errorf("panel %q query %s: datasource %+v, want %+v", p.Title, q.RefID, q.Datasource, want)
			}
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q query %s: no expr", p.Title, q.RefID)
			}
			if e := grafanaRanges.Replace(q.Expr); strings.Contains(e, "$") {
				t.Errorf("panel %q query %s: %q uses a variable other than Grafana's intervals", p.Title, q.RefID, q.Expr)
			}
		}
	}
}

// The Grafana provisioning: a Prometheus datasource with the uid the
// dashboard's datasource variable defaults to, and a file provider loading
// dashboards from one directory.
func TestGrafanaProvisioning(t *testing.T) {
	t.Parallel()
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	for file, v := range map[string]any{"grafana/datasources/prometheus.yml": &ds, "grafana/dashboards/teamster.yml": &dp} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	var current string
	for _, v := range loadDashboard(t).Templating.List {
		if v.Name == "datasource" {
			current = v.Current.Value
		}
	}
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" ||
		ds.Datasources[0].UID != current || current == "" {
		t.Errorf("datasources %+v: want apiVersion 1 and one prometheus datasource of uid %q (the dashboard's default)", ds, current)
	}
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || !filepath.IsAbs(dp.Providers[0].Options.Path) {
		t.Errorf("dashboard providers %+v: want apiVersion 1 and one file provider with an absolute path", dp)
	}
}

// --- prometheus.yml and compose.yaml ---

type scrapeConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

type composeFleet struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// prometheus.yml scrapes exactly compose.yaml's routers (job
// teamster-router) and workers (job teamster-worker), each on the port of
// its TEAMSTER_METRICS_ADDR, and loads alerts.yml; each daemon's
// healthcheck asks its own /readyz on that port.
func TestScrapeConfigCoversComposeFleet(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(scrapeFile)
	if err != nil {
		t.Fatal(err)
	}
	var sc scrapeConfig
	if err := yaml.Unmarshal(b, &sc); err != nil {
		t.Fatalf("%s: %v", scrapeFile, err)
	}
	if !slices.Contains(sc.RuleFiles, rulesFile) {
		t.Errorf("%s: rule_files %v lacks %s", scrapeFile, sc.RuleFiles, rulesFile)
	}
	got := map[string][]string{}
	for _, j := range sc.ScrapeConfigs {
		for _, s := range j.StaticConfigs {
			got[j.JobName] = append(got[j.JobName], s.Targets...)
		}
	}
	b, err = os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var c composeFleet
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	want := map[string][]string{}
	for name, s := range c.Services {
		if len(s.Command) == 0 {
			continue
		}
		job := map[string]string{"router": routerJob, "worker": workerJob}[path.Base(s.Command[0])]
		if job == "" {
			continue
		}
		addr := s.Environment["TEAMSTER_METRICS_ADDR"]
		_, port, err := net.SplitHostPort(addr)
		if err != nil || port == "" || port == "0" {
			t.Errorf("%s: TEAMSTER_METRICS_ADDR %q, want a fixed port such as :9090", name, addr)
			continue
		}
		want[job] = append(want[job], net.JoinHostPort(name, port))
		probe := []string{"CMD", "/usr/local/bin/teamster", "health", "http://127.0.0.1:" + port + "/readyz"}
		if s.Healthcheck == nil || !slices.Equal(s.Healthcheck.Test, probe) {
			t.Errorf("%s: healthcheck %+v, want test %q", name, s.Healthcheck, probe)
		}
	}
	for _, job := range []string{routerJob, workerJob} {
		sort.Strings(want[job])
		sort.Strings(got[job])
		if len(want[job]) == 0 || !slices.Equal(want[job], got[job]) {
			t.Errorf("%s: job %s scrapes %v; compose.yaml's daemons are %v", scrapeFile, job, got[job], want[job])
		}
	}
}

// --- against a real fleet and a real Prometheus ---

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
