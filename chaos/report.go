package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// maxProblems bounds the problem lines printed per scenario.
const maxProblems = 25

// printTable prints the table, then each scenario's notes and problems.
func printTable(w io.Writer, rows []*row, scs map[string]*scenario) {
	const head = "%-22s %8s %8s %5s %10s %11s %12s %8s %6s %9s %6s\n"
	fmt.Fprintf(w, head, "scenario", "attempts", "results", "lost", "duplicated", "overlapping", "out-of-order", "replayed", "other", "recovery", "took")
	for _, r := range rows {
		rec := "-"
		switch {
		case r.infra != nil:
		case r.recovered:
			rec = fmt.Sprintf("%.2fs", r.recovery.Seconds())
		default:
			rec = fmt.Sprintf(">%.0fs", r.recoveryBound.Seconds())
		}
		fmt.Fprintf(w, "%-22s %8d %8d %5d %10d %11d %12d %8d %6d %9s %6s\n", r.name, r.attempts, r.results, r.lost, r.dup,
			r.overlap, r.order, r.replays, r.other, rec, r.took.Round(time.Second))
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		verdict := "PASS"
		switch {
		case r.infra != nil:
			verdict = "ERROR (the suite could not run it)"
		case r.failed():
			verdict = "FAIL"
		}
		sc := scs[r.name]
		fmt.Fprintf(w, "── %s: %s\n", r.name, verdict)
		fmt.Fprintf(w, "   fault     %s\n", sc.what)
		fmt.Fprintf(w, "   overlap   %s\n", overlapCheckText(r.checks))
		resend := "; a second copy only as a reaper's resend (same result, later seq) after its sender died or stalled, noted"
		if sc.steadySenders {
			resend = "; no sender dies or stalls, so never a second copy"
		}
		if sc.oneEvent {
			fmt.Fprintf(w, "   events    NATS stays up: a result event for every attempt on its replyTo, equal to the durable result%s\n", resend)
		} else {
			fmt.Fprintf(w, "   events    every result event, the Handle's result and the durable result agree%s; a missing event (core NATS) is noted, not failed\n", resend)
		}
		if r.infra != nil {
			fmt.Fprintf(w, "   error     %v\n", r.infra)
		}
		fmt.Fprintf(w, "   attempts  %d submitted, %d accepted; results %s\n", r.submitted, r.attempts, formatCounts(r.codes))
		fmt.Fprintf(w, "   allowed   ok%s\n", allowedText(sc))
		if r.infra == nil {
			if r.recovered {
				fmt.Fprintf(w, "   recovery  a fresh attempt completed ok %.2fs after the fault ended (bound %s)\n", r.recovery.Seconds(), r.recoveryBound)
			} else {
				fmt.Fprintf(w, "   recovery  no fresh attempt completed ok within %s of the fault's end\n", r.recoveryBound)
			}
		}
		for _, n := range r.notes {
			fmt.Fprintf(w, "   note      %s\n", n)
		}
		for i, p := range r.problems {
			if i == maxProblems {
				fmt.Fprintf(w, "   problem   … and %d more\n", len(r.problems)-maxProblems)
				break
			}
			fmt.Fprintf(w, "   problem   %s\n", p)
		}
		fmt.Fprintln(w)
	}
}

func overlapCheckText(c string) string {
	switch c {
	case checkStepsAndLedger:
		return "CheckSteps (no run acts after a later run of its session started) + CheckLedger (start/end spans never overlap; runs of kill -9'd workers end at the kill)"
	case checkStepsOnly:
		return "CheckSteps only: a paused run records its end when it wakes, after the next turn started, so CheckLedger's span check does not apply"
	}
	return c
}

func allowedText(sc *scenario) string {
	if len(sc.allowed) == 0 {
		return " only"
	}
	var s []string
	for _, c := range sc.allowed {
		s = append(s, string(c))
	}
	return ", " + strings.Join(s, ", ")
}

// attemptRecord is one line of attempts.jsonl, the suite's own record of
// every attempt, kept with the logs for diagnosis.
type attemptRecord struct {
	ID           string    `json:"id"`
	Session      string    `json:"session"`
	Kind         string    `json:"kind"`
	State        string    `json:"state"`
	Code         string    `json:"code,omitempty"`
	Tries        int       `json:"tries"`
	Retries      []string  `json:"retries,omitempty"`
	AcceptedAt   time.Time `json:"acceptedAt,omitempty"`
	ClaimedBy    string    `json:"claimedBy,omitempty"`
	ClaimedFence string    `json:"claimedFence,omitempty"`
	ClaimedAt    time.Time `json:"claimedAt,omitempty"`
	Events       int       `json:"events"`
	ResultEvents []string  `json:"resultEvents,omitempty"`
	Durable      string    `json:"durable,omitempty"`
	DurableError string    `json:"durableError,omitempty"`
}

// writeAttempts writes attempts.jsonl into dir.
func writeAttempts(path string, t *tracker) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, a := range t.all {
		rec := attemptRecord{ID: a.id, Session: a.session, Kind: a.kind, State: a.state, Code: a.code,
			Tries: a.tries, AcceptedAt: a.acceptedAt, ClaimedAt: a.claimedAt, Events: a.events}
		for _, rt := range a.retries {
			rec.Retries = append(rec.Retries, rt.why+" at "+rt.at.Format("15:04:05.000"))
		}
		if a.claimed != nil {
			rec.ClaimedBy, rec.ClaimedFence = a.claimed.WorkerID, a.claimed.Fence
		}
		for _, ev := range a.results {
			rec.ResultEvents = append(rec.ResultEvents, fmt.Sprintf("seq %d at %s: %s", ev.seq, ev.at.Format("15:04:05.000"), summarize(canonical(ev.data))))
		}
		if a.durable != nil {
			rec.Durable = summarize(canonicalResult(a.durable)) + ": " + errMessage(a.durable)
		}
		if a.durableErr != nil {
			rec.DurableError = a.durableErr.Error()
		}
		line, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
