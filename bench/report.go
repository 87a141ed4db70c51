package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one line of the results table (and of bench/results.json).
type Row struct {
	Scenario string `json:"scenario"`
	// P50Us and P99Us are latencies in microseconds, when the row measures
	// one.
	P50Us *float64 `json:"p50Us,omitempty"`
	P99Us *float64 `json:"p99Us,omitempty"`
	// Samples is how many latencies P50Us and P99Us were taken from.
	Samples int      `json:"samples,omitempty"`
	Value   *float64 `json:"value,omitempty"`
	Unit    string   `json:"unit,omitempty"`
	// Goal is the acceptance goal the row is checked against, Pass the
	// verdict; both are empty for rows without a goal.
	Goal string `json:"goal,omitempty"`
	Pass *bool  `json:"pass,omitempty"`
	Note string `json:"note,omitempty"`
}

// latencies is a set of measured durations.
type latencies []time.Duration

// pct is the p-th percentile (nearest rank).
func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// withLatency sets the row's p50 and p99 from l.
func (r Row) withLatency(l latencies) Row {
	if len(l) == 0 {
		return r
	}
	r.P50Us = ptr(us(l.pct(50)))
	r.P99Us = ptr(us(l.pct(99)))
	r.Samples = len(l)
	return r
}

// withGoal sets the row's goal and verdict.
func (r Row) withGoal(goal string, pass bool) Row {
	r.Goal = goal
	r.Pass = &pass
	return r
}

func ptr[T any](v T) *T { return &v }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// fmtUs prints a latency in microseconds with a unit that fits.
func fmtUs(v *float64) string {
	if v == nil {
		return "-"
	}
	switch x := *v; {
	case x >= 1e6:
		return fmt.Sprintf("%.2fs", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.2fms", x/1e3)
	default:
		return fmt.Sprintf("%.0fµs", x)
	}
}

func fmtValue(v *float64) string {
	if v == nil {
		return "-"
	}
	switch x := *v; {
	case x == math.Trunc(x) && math.Abs(x) < 1e15:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

func verdict(p *bool) string {
	switch {
	case p == nil:
		return ""
	case *p:
		return "PASS"
	default:
		return "FAIL"
	}
}

// printTable writes the rows as an aligned table.
func printTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tP50\tP99\tVALUE\tUNIT\tGOAL\tRESULT\tNOTE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, fmtUs(r.P50Us), fmtUs(r.P99Us),
			fmtValue(r.Value), dash(r.Unit), dash(r.Goal), verdict(r.Pass), r.Note)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Results is what bench/results.json holds.
type Results struct {
	Started  time.Time         `json:"started"`
	Duration string            `json:"duration"`
	Env      map[string]string `json:"env"`
	Rows     []Row             `json:"rows"`
	Failed   []string          `json:"failedGoals"`
}

func writeJSON(path string, res Results) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// failedGoals lists the scenarios whose goal failed.
func failedGoals(rows []Row) []string {
	out := []string{}
	for _, r := range rows {
		if r.Pass != nil && !*r.Pass {
			out = append(out, r.Scenario)
		}
	}
	return out
}

// progress prints a progress line to stderr.
var progressStart = time.Now()

func progress(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(os.Stderr, "[bench %6.1fs] %s\n", time.Since(progressStart).Seconds(), strings.TrimRight(msg, "\n"))
}
