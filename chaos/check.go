package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/scripted"
)

// Overlap checks a scenario uses (see the table's notes).
const (
	// checkStepsAndLedger: scripted.CheckSteps (no run acts after a later
	// run of its session started) and scripted.CheckLedger (no run starts
	// before the previous one's end; every start has an end).
	checkStepsAndLedger = "steps+ledger"
	// checkStepsOnly: scripted.CheckSteps alone. A paused run records its
	// end when it wakes, after the next turn started, which CheckLedger
	// would call an overlap although the paused run did nothing.
	checkStepsOnly = "steps"
)

// row is one scenario's line of the table, and what stands behind it.
type row struct {
	name      string
	submitted int // attempts the suite made (accepted or not)
	attempts  int // accepted attempts
	results   int // accepted attempts with a terminal result (event or durable)
	lost      int // accepted attempts with no result at all within the bound
	dup       int // attempts with two different results (or, where NATS stays up, two result events)
	overlap   int // CheckSteps problems, plus CheckLedger overlaps where that check applies
	order     int // sessions whose runs started in an order other than acceptance
	replays   int // CheckReplays problems: a claimed attempt that started twice
	other     int // every other broken promise, each with a problem line

	recovery      time.Duration
	recovered     bool
	recoveryBound time.Duration
	took          time.Duration

	codes    map[string]int
	checks   string
	problems []string
	notes    []string
	infra    error // the suite could not run the scenario
}

func (r *row) failed() bool {
	return r.infra != nil || r.lost+r.dup+r.overlap+r.order+r.replays+r.other > 0 || !r.recovered
}

func (r *row) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *row) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// checkInput is what a scenario leaves for the checks.
type checkInput struct {
	t       *tracker
	entries []scripted.Entry
	// extraEnds are end entries the suite adds for runs whose process was
	// killed (kill -9 ends a run at that moment; the harness cannot say so).
	extraEnds []scripted.Entry
	// sessionFences is each session's record fence in Redis at the end.
	sessionFences map[string]string
	// lostRecordEpochs: Redis lost its data; a session whose last ok turn
	// carries one of these epochs may have no record at all.
	lostRecordEpochs map[string]bool
	allowed          map[teamster.Code]bool
	ledgerCheck      string
	oneEvent         bool
	// steadySenders: no process that sends result events dies or stalls,
	// so no result event may arrive twice (see scenario.steadySenders).
	steadySenders bool
	// noRefusals: the fault is a failover the fleet rides out, so a
	// refused submit is a failure.
	noRefusals bool
}

// isResend says whether result events with the same result are the fleet's
// resends of one: each later one has a higher seq (a reaper's result event
// continues after the attempt's seq reservation, beyond any seq its worker
// sent).
func isResend(evs []resultEvent) bool {
	for i := 1; i < len(evs); i++ {
		if evs[i].seq <= evs[i-1].seq {
			return false
		}
	}
	return true
}

func seqsOf(evs []resultEvent) string {
	seqs := make([]string, len(evs))
	for i, e := range evs {
		seqs[i] = fmt.Sprint(e.seq)
	}
	return strings.Join(seqs, ",")
}

// check runs every check of the suite over one scenario's attempts and
// ledger and fills r.
func check(r *row, in checkInput) {
	r.checks = in.ledgerCheck
	r.codes = map[string]int{}
	t := in.t
	t.mu.Lock()
	defer t.mu.Unlock()

	starts := map[string]int{} // attempt -> starts in the ledger
	steps := map[string]int{}  // attempt -> steps in the ledger
	startTimes := map[string]time.Time{}
	for _, e := range in.entries {
		switch e.Event {
		case scripted.EventStart:
			starts[e.Attempt]++
			startTimes[e.Attempt] = time.Unix(0, e.TimeNs)
		case scripted.EventStep:
			steps[e.Attempt]++
		}
	}

	// Exactly one terminal result per accepted attempt.
	resubmitted, noEvent, resent := 0, 0, 0
	idle := map[string]int{} // lease_lost / worker_lost results of runs that never acted
	var stranded []string    // claimed, never run, settled by the reaper
	rejected := map[string]int{}
	retries := map[string]int{}
	fallbacks, fellBack := 0, 0 // fallback answers; attempts that got one
	var firstFallback, lastFallback time.Time
	for _, a := range t.all {
		r.submitted++
		fell := false
		for _, rt := range a.retries {
			retries[rt.why]++
			// The first attempt of a fresh fleet may meet a router that has
			// not heard of the workers yet; later ones may not.
			if rt.why == retryFallback && a.kind != kindFirst {
				fallbacks++
				fell = true
				if firstFallback.IsZero() || rt.at.Before(firstFallback) {
					firstFallback = rt.at
				}
				if rt.at.After(lastFallback) {
					lastFallback = rt.at
				}
			}
		}
		if fell {
			fellBack++
		}
		if a.tries > 1 {
			resubmitted++
		}
		switch a.state {
		case stateRejected:
			rejected[a.code]++
			if starts[a.id] > 0 {
				r.other++
				r.problem("attempt %s was refused (%s) but ran", a.id, a.code)
			}
			continue
		case stateUnanswered:
			r.other++
			r.problem("attempt %s (%s): no definite submit reply after %d tries (last: %s)", a.id, a.kind, a.tries, a.code)
			continue
		case stateAccepted:
		default:
			continue
		}
		r.attempts++
		if a.foreign > 0 {
			r.other++
			r.problem("attempt %s: %d events about another attempt arrived on its replyTo", a.id, a.foreign)
		}
		contents := map[string]bool{}
		for _, ev := range a.results {
			contents[canonical(ev.data)] = true
		}
		if a.durable != nil {
			contents[canonicalResult(a.durable)] = true
		}
		if a.clientRes != nil {
			contents[canonicalResult(a.clientRes)] = true
		}
		switch {
		case len(a.results) == 0 && a.durable == nil:
			r.lost++
			r.problem("attempt %s (%s, session %s): no result (event or durable); %s; durable read: %v",
				a.id, a.kind, a.session, claimedString(a), a.durableErr)
			continue
		case a.durable == nil:
			r.other++
			r.problem("attempt %s: %d result event(s) but no durable result (%v)", a.id, len(a.results), a.durableErr)
		}
		r.results++
		if len(contents) > 1 {
			r.dup++
			var variants []string
			for c := range contents {
				variants = append(variants, summarize(c))
			}
			sort.Strings(variants)
			r.problem("attempt %s: %d different results: %s", a.id, len(contents), strings.Join(variants, " | "))
		} else if len(a.results) > 1 {
			if in.steadySenders || !isResend(a.results) {
				r.dup++
				r.problem("attempt %s: %d result events with the same result on its replyTo (seqs %s; %s), want one",
					a.id, len(a.results), seqsOf(a.results), summarize(canonical(a.results[0].data)))
			} else {
				resent++
			}
		}
		switch {
		case in.oneEvent && len(a.results) == 0:
			r.other++
			r.problem("attempt %s: no result event on its replyTo (only the durable result), though NATS stayed up", a.id)
		case len(a.results) == 0:
			noEvent++
		}
		res := a.durable
		if res == nil {
			res = decodeResult(a.results[0].data)
		}
		code := "undecodable"
		var sideEffects teamster.SideEffects
		if res != nil {
			code = string(teamster.StatusOK)
			if res.Error != nil {
				code, sideEffects = string(res.Error.Code), res.Error.SideEffects
			}
		}
		r.codes[code]++
		if code != string(teamster.StatusOK) && !in.allowed[teamster.Code(code)] {
			r.other++
			r.problem("attempt %s (%s): unexpected result %s: %s", a.id, a.kind, code, errMessage(res))
		}
		if sideEffects == teamster.SideEffectsNone && starts[a.id] > 0 {
			r.other++
			r.problem("attempt %s: result %s says sideEffects none, but the ledger shows it ran", a.id, code)
		}
		if (code == string(teamster.CodeWorkerLost) || code == string(teamster.CodeLeaseLost)) && steps[a.id] == 0 {
			if starts[a.id] == 0 {
				idle[code+" (never started)"]++
				if len(a.results) > 0 && !a.redisClaim.IsZero() {
					stranded = append(stranded, fmt.Sprintf("%s (claimed in Redis by %s at %s, no claimed event, result %s later)",
						a.id, res.WorkerID, a.redisClaim.Format("15:04:05.000"), a.results[0].at.Sub(a.redisClaim).Round(time.Millisecond)))
				}
			} else {
				idle[code+" (started, no step)"]++
			}
		}
	}
	if resubmitted > 0 {
		r.note("%d attempts resubmitted with the same attemptId (retries: %s)", resubmitted, formatCounts(retries))
	}
	if len(idle) > 0 {
		r.note("claimed attempts that failed before their first step (queued work lost to the fault, reported honestly): %s", formatCounts(idle))
	}
	for _, s := range stranded {
		r.note("stranded claim: %s", s)
	}
	if len(rejected) > 0 {
		r.note("refused submits: %s", formatCounts(rejected))
		if in.noRefusals {
			for _, n := range rejected {
				r.other += n
			}
			r.problem("submits refused during a failover the fleet must ride out: %s", formatCounts(rejected))
		}
	}
	if fallbacks > 0 {
		// Three workers host the harness all along (a draining or paused one
		// still counts): a fallback sends the turn back to the gateway while
		// the fleet could run it.
		r.other += fellBack
		r.problem("%d submits of %d attempts were answered fallback (\"no live worker hosts the harness\") from %s to %s (%s) although workers were running; the suite resubmitted them",
			fallbacks, fellBack, firstFallback.Format("15:04:05.000"), lastFallback.Format("15:04:05.000"),
			lastFallback.Sub(firstFallback).Round(time.Millisecond))
	}
	if noEvent > 0 {
		r.note("%d attempts got no result event on their replyTo, only the durable result (core NATS)", noEvent)
	}
	if resent > 0 {
		r.note("%d attempts got their result event twice on their replyTo: its sender died or stalled between sending it and confirming it, "+
			"and a reaper sent it again after the send window (the same result, a later seq; the client keeps the first)", resent)
	}
	if t.badEvents > 0 {
		r.other++
		r.problem("%d undecodable events on reply subjects", t.badEvents)
	}

	// Every run in the ledger belongs to an accepted attempt.
	for id := range starts {
		if a := t.byID[id]; a == nil {
			r.other++
			r.problem("the ledger has a run of attempt %s, which the suite never submitted", id)
		} else if a.state == stateUnanswered {
			r.note("attempt %s ran though its submit went unanswered", id)
		}
	}

	// No two runs of one session overlap.
	r.overlap += countLines(scripted.CheckSteps(in.entries), r, "CheckSteps")
	if in.ledgerCheck == checkStepsAndLedger {
		all := append(slices.Clone(in.entries), in.extraEnds...)
		if err := scripted.CheckLedger(all); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.Contains(line, "while attempt") {
					r.overlap++
				} else {
					r.other++
				}
				r.problem("CheckLedger: %s", line)
			}
		}
	}

	// No claimed attempt ran twice.
	r.replays += countLines(scripted.CheckReplays(in.entries), r, "CheckReplays")

	// Each session's turns ran in acceptance order.
	startedOrder := map[string][]string{}
	for _, e := range in.entries {
		if e.Event == scripted.EventStart {
			startedOrder[e.Session] = append(startedOrder[e.Session], e.Attempt)
		}
	}
	for s, acc := range t.sessions {
		var want []string
		for _, a := range acc {
			if starts[a.id] > 0 {
				want = append(want, a.id)
			}
		}
		got := startedOrder[s]
		if !slices.Equal(got, want) {
			r.order++
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			r.problem("session %s: runs started in an order other than acceptance: from turn %d on it ran %s, accepted %s (%d runs)",
				s, i+1, describeRuns(t, got[i:], steps, startTimes), describeRuns(t, want[i:], steps, startTimes), len(got))
		}
	}

	// The session record carries the fence of the last committed (ok) turn.
	for s, acc := range t.sessions {
		want := ""
		for _, a := range acc {
			if res := a.durable; res != nil && res.Status == teamster.StatusOK {
				want = res.Fence
			}
		}
		if want == "" {
			continue
		}
		got := in.sessionFences[s]
		if got == want || (got == "" && in.lostRecordEpochs[epochOf(want)]) {
			continue
		}
		r.other++
		r.problem("session %s: the record's fence is %q, but its last committed turn ran under %q", s, got, want)
	}
}

// describeRuns lists the first few attempts of ids with what happened to
// them, for a problem line.
func describeRuns(t *tracker, ids []string, steps map[string]int, startTimes map[string]time.Time) string {
	var parts []string
	for i, id := range ids {
		if i == 3 {
			parts = append(parts, "…")
			break
		}
		a := t.byID[id]
		desc := id
		if a != nil {
			desc += fmt.Sprintf(" (accepted %s", a.acceptedAt.Format("15:04:05.000"))
			if a.claimed != nil {
				desc += fmt.Sprintf(", claimed by %s under %s", a.claimed.WorkerID, a.claimed.Fence)
				if !a.redisClaim.IsZero() {
					desc += " at " + a.redisClaim.Format("15:04:05.000")
				}
				desc += ", claimed event " + a.claimedAt.Format("15:04:05.000")
			}
			if a.durable != nil {
				desc += ", " + summarize(canonicalResult(a.durable))
			}
			desc += fmt.Sprintf(", %d steps, started %s)", steps[id], startTimes[id].Format("15:04:05.000"))
		}
		parts = append(parts, desc)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func countLines(err error, r *row, what string) int {
	if err == nil {
		return 0
	}
	lines := strings.Split(err.Error(), "\n")
	for _, l := range lines {
		r.problem("%s: %s", what, l)
	}
	return len(lines)
}

// canonical is a result body in one form, so that results compare by
// content, not by bytes.
func canonical(b []byte) string {
	r := decodeResult(b)
	if r == nil {
		return "undecodable:" + string(b)
	}
	return canonicalResult(r)
}

func canonicalResult(r *bus.Result) string {
	b, err := json.Marshal(r)
	if err != nil {
		return "unencodable"
	}
	return string(b)
}

func decodeResult(b []byte) *bus.Result {
	var r bus.Result
	if err := bus.Decode(b, &r); err != nil {
		return nil
	}
	return &r
}

// summarize is a short form of a canonical result for a problem line.
func summarize(c string) string {
	var r bus.Result
	if err := json.Unmarshal([]byte(c), &r); err != nil {
		return c
	}
	s := fmt.Sprintf("%s by %s fence %s", r.Status, r.WorkerID, r.Fence)
	if r.Error != nil {
		s += " " + string(r.Error.Code)
	}
	return s
}

func errMessage(r *bus.Result) string {
	if r == nil || r.Error == nil {
		return ""
	}
	return r.Error.Message
}

func claimedString(a *attempt) string {
	s := "no claimed event"
	if a.claimed != nil {
		s = fmt.Sprintf("claimed event: by %s under %s", a.claimed.WorkerID, a.claimed.Fence)
	}
	if a.redisState != "" {
		s += fmt.Sprintf("; Redis record: state %s", a.redisState)
	}
	if !a.redisClaim.IsZero() {
		s += fmt.Sprintf(", claimed by %s at %s", a.redisWorker, a.redisClaim.Format("15:04:05.000"))
	}
	return s
}

// epochOf is the epoch of a fence <epoch>:<n>.
func epochOf(fence string) string {
	e, _, _ := strings.Cut(fence, ":")
	return e
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
