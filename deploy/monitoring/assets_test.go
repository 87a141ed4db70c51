package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
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
