package codex

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// report is one usage report the meter produced.
type report struct {
	ID     string
	Tokens int64
}

func tokenNote(turn string, total, totalOut, lastOut int64) tokenUsageNote {
	var n tokenUsageNote
	n.TurnID = turn
	n.TokenUsage.Total = tokenBreakdown{TotalTokens: total, OutputTokens: totalOut}
	n.TokenUsage.Last = tokenBreakdown{OutputTokens: lastOut}
	return n
}

// The sequences below are what the app-server 0.171.0 sends (see the
// package doc and usage.go).
func TestUsageMeter(t *testing.T) {
	type step struct {
		raw   *rawResponseNote
		token *tokenUsageNote
	}
	raw := func(id string, out int64) step {
		return step{raw: &rawResponseNote{TurnID: "t2", ResponseID: id, Usage: &tokenBreakdown{OutputTokens: out}}}
	}
	tok := func(turn string, total, totalOut, lastOut int64) step {
		n := tokenNote(turn, total, totalOut, lastOut)
		return step{token: &n}
	}
	for _, tc := range []struct {
		name  string
		fresh bool
		steps []step
		want  []report
	}{{
		name:  "new thread with raw events: the response ids, each response once",
		fresh: true,
		steps: []step{raw("resp_1", 3), tok("t2", 15, 3, 3), raw("resp_2", 4), tok("t2", 30, 7, 4)},
		want:  []report{{"resp_1", 3}, {"resp_2", 4}},
	}, {
		name: "resumed thread: the replayed total is the baseline, then one report per moved total",
		steps: []step{
			tok("t1", 45, 13, 6), // replay on resume, previous turn's id
			tok("t2", 60, 16, 3), // first response of this turn
			tok("t2", 75, 18, 2), // second
		},
		want: []report{{"th/usage-60-16", 3}, {"th/usage-75-18", 2}},
	}, {
		name: "a steer re-sends the unchanged total under this turn's id: not a response",
		steps: []step{
			tok("t1", 45, 13, 6),
			tok("t2", 45, 13, 6), // the aborted request
			tok("t2", 60, 16, 3),
		},
		want: []report{{"th/usage-60-16", 3}},
	}, {
		name:  "a repeated notification is one response",
		fresh: true,
		steps: []step{tok("t2", 15, 5, 5), tok("t2", 15, 5, 5)},
		want:  []report{{"th/usage-15-5", 5}},
	}, {
		name:  "another turn's usage is never reported",
		fresh: true,
		steps: []step{tok("t9", 15, 5, 5)},
		want:  nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var u usageMeter
			if tc.fresh {
				u.fresh()
			}
			var got []report
			for _, s := range tc.steps {
				var id string
				var n int64
				var ok bool
				if s.raw != nil {
					id, n, ok = u.raw(*s.raw)
				} else {
					id, n, ok = u.tokens("th", *s.token, s.token.TurnID == "t2")
				}
				if ok {
					got = append(got, report{id, n})
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("reports (-want +got):\n%s", d)
			}
		})
	}
}
