package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

func printJSON(out io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(out, `{"error":"unprintable"}`)
		return
	}
	fmt.Fprintln(out, string(b))
}

func printReply(out io.Writer, r *bus.SubmitReply) {
	switch r.Status {
	case bus.StatusAccepted:
		fmt.Fprintf(out, "accepted  %s → %s\n", r.AttemptID, r.HarnessID)
	case bus.StatusFallback:
		fmt.Fprintf(out, "fallback  %s: no plugin harness; the gateway runs the turn on its embedded runtime\n", r.AttemptID)
	default:
		fmt.Fprintf(out, "rejected  %s\n", r.Error)
	}
	if r.Selection != nil {
		fmt.Fprintf(out, "  selection  %s\n", selectionLine(r.Selection))
	}
}

// selectionLine is one line: runtime, its source, what was selected and why,
// and each candidate's support.
func selectionLine(rec *selection.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "runtime %s (%s)", rec.Runtime, rec.RuntimeSource)
	if rec.SelectedHarnessID != "" {
		fmt.Fprintf(&b, " → %s [%s]", rec.SelectedHarnessID, rec.SelectedReason)
	}
	if len(rec.Candidates) > 0 {
		parts := make([]string, len(rec.Candidates))
		for i, c := range rec.Candidates {
			if c.Supported {
				parts[i] = c.ID + " ✓"
			} else {
				parts[i] = c.ID + " ✗"
			}
		}
		b.WriteString("; candidates: " + strings.Join(parts, ", "))
	}
	return b.String()
}

// printSelection prints a decision with its candidate table.
func printSelection(out io.Writer, rec *selection.Record, err error) {
	fmt.Fprintf(out, "provider   %s\nmodel      %s\n", rec.Provider, rec.ModelID)
	fmt.Fprintf(out, "runtime    %s (source: %s)\n", rec.Runtime, rec.RuntimeSource)
	if err != nil {
		fmt.Fprintf(out, "selected   none: %s\n", err)
	} else {
		fmt.Fprintf(out, "selected   %s (%s)\n", rec.SelectedHarnessID, rec.SelectedReason)
	}
	for _, n := range rec.Notes {
		fmt.Fprintf(out, "note       %s\n", n)
	}
	fmt.Fprintln(out)
	if len(rec.Candidates) == 0 {
		fmt.Fprintln(out, "no registered harnesses")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CANDIDATE\tLABEL\tPLUGIN\tPRIORITY\tSUPPORTED\tREASON")
	for _, c := range rec.Candidates {
		sup := "no"
		if c.Supported {
			sup = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", c.ID, dash(c.Label), dash(c.PluginID), c.Priority, sup, dash(c.Reason))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// describeEvent renders an event's data briefly.
func describeEvent(e bus.Event) string {
	var m map[string]any
	_ = json.Unmarshal(e.Data, &m)
	switch e.Type {
	case bus.EventClaimed:
		return fmt.Sprintf("claimed    by %v (fence %v)", m["workerId"], m["fence"])
	case bus.EventPartial:
		return fmt.Sprintf("partial    %q", clip(fmt.Sprint(m["text"]), 60))
	case bus.EventAgent:
		return fmt.Sprintf("agent      %v: %q", m["kind"], clip(fmt.Sprint(m["text"]), 60))
	case bus.EventUsage:
		return fmt.Sprintf("usage      %v output tokens so far", m["outputTokens"])
	case bus.EventTool:
		return fmt.Sprintf("tool       %v %v", m["name"], m["outcome"])
	case bus.EventInjection:
		return fmt.Sprintf("injection  %v %v", m["injectionId"], m["state"])
	}
	return fmt.Sprintf("%-10s %s", e.Type, clip(string(e.Data), 60))
}

func printResult(out io.Writer, r *bus.Result, took time.Duration) {
	line := fmt.Sprintf("result     %s", r.Status)
	if r.Error != nil {
		line += fmt.Sprintf(" %s: %s (side effects: %s)", r.Error.Code, r.Error.Message, r.Error.SideEffects)
	}
	if len(r.AssistantTexts) > 0 {
		line += fmt.Sprintf("  %q", clip(strings.Join(r.AssistantTexts, " "), 70))
	}
	if r.Classification != "" {
		line += " [" + r.Classification + "]"
	}
	fmt.Fprintln(out, "  "+line)
	var facts []string
	if r.WorkerID != "" {
		facts = append(facts, "worker "+r.WorkerID)
	}
	if r.Fence != "" {
		facts = append(facts, "fence "+r.Fence)
	}
	if r.Usage.OutputTokens > 0 {
		facts = append(facts, fmt.Sprintf("%d output tokens", r.Usage.OutputTokens))
	}
	if took > 0 {
		facts = append(facts, took.Round(time.Millisecond).String())
	}
	if len(facts) > 0 {
		fmt.Fprintf(out, "             %s\n", strings.Join(facts, ", "))
	}
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
