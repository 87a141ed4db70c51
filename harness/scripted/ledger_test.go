package scripted_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness/scripted"
)

func TestLedgerRecordsRuns(t *testing.T) {
	var l scripted.MemoryLedger
	hs := scripted.New(manifest("none"), scripted.Options{Ledger: &l})
	run := newRun("hi", &host{})
	run.Delegate = "voice-call"
	if _, err := hs.RunAttempt(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	// A failed run is recorded too.
	run2 := newRun(script(t, m{"fail": "x"}), &host{})
	run2.Attempt.AttemptID = "a2"
	if _, err := hs.RunAttempt(context.Background(), run2); err == nil {
		t.Fatal("the failing script succeeded")
	}
	entries := l.Entries()
	want := []scripted.Entry{
		{Event: "start", Session: "agent:main:s1", Attempt: "a1", Worker: "w1", Fence: "e1:1", Delegate: "voice-call"},
		{Event: "step", Session: "agent:main:s1", Attempt: "a1", Worker: "w1", Fence: "e1:1", Delegate: "voice-call"},
		{Event: "end", Session: "agent:main:s1", Attempt: "a1", Worker: "w1", Fence: "e1:1", Delegate: "voice-call"},
		{Event: "start", Session: "agent:main:s1", Attempt: "a2", Worker: "w1", Fence: "e1:1"},
		{Event: "step", Session: "agent:main:s1", Attempt: "a2", Worker: "w1", Fence: "e1:1"},
		{Event: "end", Session: "agent:main:s1", Attempt: "a2", Worker: "w1", Fence: "e1:1"},
	}
	if diff := cmp.Diff(want, entries, cmpopts.IgnoreFields(scripted.Entry{}, "TimeNs")); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].TimeNs < entries[i-1].TimeNs || entries[i].TimeNs == 0 {
			t.Errorf("entry %d time %d after %d", i, entries[i].TimeNs, entries[i-1].TimeNs)
		}
	}
	if err := scripted.CheckLedger(entries); err != nil {
		t.Errorf("CheckLedger: %v", err)
	}
	if err := scripted.CheckReplays(entries); err != nil {
		t.Errorf("CheckReplays: %v", err)
	}
}

func TestFileLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	// Two ledgers on one file stand for two worker processes.
	l1, err := scripted.NewFileLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := scripted.NewFileLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	const runs = 40
	var wg sync.WaitGroup
	for i := range runs {
		l := l1
		if i%2 == 1 {
			l = l2
		}
		wg.Go(func() {
			hs := scripted.New(manifest("none"), scripted.Options{Ledger: l})
			run := newRun("hi", &host{})
			run.Attempt.SessionKey = fmt.Sprint("session-", i)
			run.Attempt.AttemptID = fmt.Sprint("a", i)
			if _, err := hs.RunAttempt(context.Background(), run); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := scripted.ReadLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3*runs { // start, one step (the echo), end
		t.Fatalf("%d entries, want %d", len(entries), 3*runs)
	}
	if err := scripted.CheckLedger(entries); err != nil {
		t.Errorf("CheckLedger: %v", err)
	}

	// Record after Close is reported by the next Close.
	l1.Record(scripted.Entry{Event: "start"})
	if err := l1.Close(); err == nil {
		t.Errorf("Close after a failed Record returned nil")
	}

	// A file with a line that is not an entry does not read.
	if err := os.WriteFile(path, []byte("{\"event\":\"start\"}\n\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := scripted.ReadLedger(path); err == nil || !strings.Contains(err.Error(), ":3:") {
		t.Errorf("ReadLedger of a bad line: %v, want an error naming line 3", err)
	}
	if _, err := scripted.ReadLedger(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("ReadLedger of a missing file returned nil")
	}
}

func TestCheckLedger(t *testing.T) {
	e := func(event, session, attempt, worker string, ns int64) scripted.Entry {
		return scripted.Entry{Event: event, Session: session, Attempt: attempt, Worker: worker, Fence: "f", TimeNs: ns}
	}
	for _, tc := range []struct {
		name    string
		entries []scripted.Entry
		want    []string // parts of the error; nil for no error
	}{
		{"empty", nil, nil},
		{"sequential", []scripted.Entry{
			e("start", "s", "a1", "w1", 10), e("end", "s", "a1", "w1", 20),
			e("start", "s", "a2", "w2", 20), e("end", "s", "a2", "w2", 30),
		}, nil},
		{"other sessions overlap freely", []scripted.Entry{
			e("start", "s", "a1", "w1", 10), e("start", "t", "b1", "w2", 12),
			e("end", "t", "b1", "w2", 15), e("end", "s", "a1", "w1", 20),
		}, nil},
		{"overlap", []scripted.Entry{
			e("start", "s", "a1", "w1", 10), e("start", "s", "a2", "w2", 15),
			e("end", "s", "a1", "w1", 20), e("end", "s", "a2", "w2", 30),
		}, []string{`session "s"`, `attempt "a2"`, `attempt "a1"`}},
		{"overlap recorded out of order", []scripted.Entry{
			e("start", "s", "a2", "w2", 15), e("end", "s", "a2", "w2", 16),
			e("start", "s", "a1", "w1", 10), e("end", "s", "a1", "w1", 20),
		}, []string{`attempt "a2"`}},
		{"nested in a long run", []scripted.Entry{
			e("start", "s", "a1", "w1", 10), e("end", "s", "a1", "w1", 100),
			e("start", "s", "a2", "w2", 20), e("end", "s", "a2", "w2", 30),
			e("start", "s", "a3", "w2", 40), e("end", "s", "a3", "w2", 50),
		}, []string{`attempt "a2"`, `attempt "a3"`}},
		{"same start", []scripted.Entry{
			e("start", "s", "a1", "w1", 10), e("start", "s", "a2", "w2", 10),
			e("end", "s", "a2", "w2", 10), e("end", "s", "a1", "w1", 10),
		}, []string{"started at 10"}},
		{"missing end", []scripted.Entry{
			e("start", "s", "a1", "w1", 10), e("end", "s", "a1", "w1", 20),
			e("start", "s", "a2", "w2", 30),
		}, []string{`attempt "a2"`, "without an end"}},
		{"end without start", []scripted.Entry{e("end", "s", "a1", "w1", 20)}, []string{"without a start"}},
		{"unknown event", []scripted.Entry{e("begin", "s", "a1", "w1", 20)}, []string{`unknown event "begin"`}},
		{"end before start", []scripted.Entry{e("start", "s", "a1", "w1", 20), e("end", "s", "a1", "w1", 10)}, []string{"ended before it started"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := scripted.CheckLedger(tc.entries)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckLedger: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckLedger = nil, want an error")
			}
			for _, p := range tc.want {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error %q does not contain %q", err, p)
				}
			}
		})
	}
}

func TestCheckReplays(t *testing.T) {
	entries := []scripted.Entry{
		{Event: "start", Session: "s", Attempt: "a1", Worker: "w1", TimeNs: 1},
		{Event: "end", Session: "s", Attempt: "a1", Worker: "w1", TimeNs: 2},
		{Event: "start", Session: "s", Attempt: "a1", Worker: "w2", TimeNs: 3},
		{Event: "end", Session: "s", Attempt: "a1", Worker: "w2", TimeNs: 4},
	}
	if err := scripted.CheckLedger(entries); err != nil {
		t.Errorf("CheckLedger: %v (the runs do not overlap)", err)
	}
	if err := scripted.CheckReplays(entries); err == nil || !strings.Contains(err.Error(), `"a1"`) {
		t.Errorf("CheckReplays: %v, want attempt a1 reported", err)
	}
	if err := scripted.CheckReplays(entries[:2]); err != nil {
		t.Errorf("CheckReplays of one run: %v", err)
	}
}

// A run that acts after a later run of its session started is caught; one
// that only records its end after waking (its lease check failed first) is
// not.
func TestCheckSteps(t *testing.T) {
	e := func(ev, attempt, fence string) scripted.Entry {
		return scripted.Entry{Event: ev, Session: "s", Attempt: attempt, Worker: "w", Fence: fence}
	}
	ok := []scripted.Entry{e("start", "a1", "f:1"), e("step", "a1", "f:1"), e("start", "a2", "f:2"), e("step", "a2", "f:2"), e("end", "a1", "f:1"), e("end", "a2", "f:2")}
	if err := scripted.CheckSteps(ok); err != nil {
		t.Fatalf("a late end flagged: %v", err)
	}
	bad := []scripted.Entry{e("start", "a1", "f:1"), e("start", "a2", "f:2"), e("step", "a1", "f:1")}
	if err := scripted.CheckSteps(bad); err == nil {
		t.Fatal("a step after a later start passed")
	}
}

// A run whose lease is no longer current stops before its next step.
func TestRunStopsWhenNotCurrent(t *testing.T) {
	var l scripted.MemoryLedger
	hs := scripted.New(manifest("none"), scripted.Options{Ledger: &l})
	run := newRun(script(t, m{"say": "one"}, m{"say": "two"}), &host{})
	calls := 0
	run.Current = func() bool { calls++; return calls == 1 }
	_, err := hs.RunAttempt(context.Background(), run)
	if !errors.Is(err, teamster.ErrLeaseLost) {
		t.Fatalf("error %v, want lease_lost", err)
	}
	steps := 0
	for _, en := range l.Entries() {
		if en.Event == scripted.EventStep {
			steps++
		}
	}
	if steps != 1 {
		t.Fatalf("%d steps recorded, want 1 (the second was refused)", steps)
	}
}
