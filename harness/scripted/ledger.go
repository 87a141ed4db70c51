package scripted

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
)

// Ledger events.
const (
	EventStart = "start"
	EventEnd   = "end"
	// EventStep is recorded before each step acts, once the run's lease was
	// checked current (harness.Run.Current).
	EventStep = "step"
)

// Entry is one ledger line: a run of the scripted harness started or ended.
type Entry struct {
	// Event is EventStart or EventEnd.
	Event string `json:"event"`
	// Session is the attempt's session key.
	Session string `json:"session"`
	// Attempt is the attempt id.
	Attempt string `json:"attempt"`
	// Worker and Fence identify the lease the run held.
	Worker string `json:"worker"`
	Fence  string `json:"fence"`
	// Delegate is the delegate that submitted the attempt, "" for the owner.
	Delegate string `json:"delegate,omitempty"`
	// Step is the index of the step an EventStep entry is about.
	Step int `json:"step,omitempty"`
	// TimeNs is the wall clock (time.Now().UnixNano()) when the entry was
	// made, so that entries of several processes on one host compare.
	TimeNs int64 `json:"timeNs"`
}

// Ledger records the start and end of runs. Implementations are safe for
// concurrent use.
type Ledger interface {
	Record(Entry)
}

// MemoryLedger is a Ledger in memory, for in-process tests. The zero value is
// ready to use.
type MemoryLedger struct {
	mu      sync.Mutex
	entries []Entry
}

// Record appends e.
func (l *MemoryLedger) Record(e Entry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// Entries returns a copy of the entries recorded so far, in order.
func (l *MemoryLedger) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// FileLedger is a Ledger that appends one JSON line per entry to a file, so
// that the workers of several processes can share it: each entry is one
// write to a file opened with O_APPEND.
type FileLedger struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

// NewFileLedger opens (creating it when missing) the ledger file at path for
// appending.
func NewFileLedger(path string) (*FileLedger, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return &FileLedger{f: f}, nil
}

// Record appends e as one line. Record has no error to return: the first
// write error is kept and returned by Close.
func (l *FileLedger) Record(e Entry) {
	b, err := json.Marshal(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		if l.f == nil {
			err = os.ErrClosed
		} else {
			_, err = l.f.Write(append(b, '\n'))
		}
	}
	if err != nil && l.err == nil {
		l.err = fmt.Errorf("scripted ledger: %w", err)
	}
}

// Close closes the file. It returns the first error of any Record, else the
// error of closing.
func (l *FileLedger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.f != nil {
		err = l.f.Close()
		l.f = nil
	}
	if l.err != nil {
		return l.err
	}
	return err
}

// ReadLedger reads the entries of a ledger file in file order. Blank lines
// are skipped; any other line that is not an entry is an error.
func ReadLedger(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var entries []Entry
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// runKey identifies one run in a ledger.
type runKey struct{ session, attempt, worker, fence string }

// span is one run: its start and, once seen, its end.
type span struct {
	key        runKey
	start, end int64
	ended      bool
}

// CheckLedger checks that no two runs of one session overlapped in time: for
// each session, no run starts at or after another's start and before its end.
// It also reports every start without an end, every end without a start and
// every entry with an unknown event. Entries are read in order; a start and
// an end are the same run when session, attempt, worker and fence match. It
// returns nil when all is well, else one error listing every problem.
func CheckLedger(entries []Entry) error {
	var problems []error
	var spans []span
	open := map[runKey][]int{} // unfinished spans per run, oldest first
	for i, e := range entries {
		k := runKey{e.Session, e.Attempt, e.Worker, e.Fence}
		switch e.Event {
		case EventStart:
			open[k] = append(open[k], len(spans))
			spans = append(spans, span{key: k, start: e.TimeNs})
		case EventEnd:
			idx := open[k]
			if len(idx) == 0 {
				problems = append(problems, fmt.Errorf("entry %d: attempt %q of session %q (worker %q, fence %q) ended without a start", i, e.Attempt, e.Session, e.Worker, e.Fence))
				continue
			}
			s := &spans[idx[0]]
			open[k] = idx[1:]
			s.end, s.ended = e.TimeNs, true
			if s.end < s.start {
				problems = append(problems, fmt.Errorf("entry %d: attempt %q of session %q ended before it started", i, e.Attempt, e.Session))
			}
		case EventStep:
			// Steps are CheckSteps' concern.
		default:
			problems = append(problems, fmt.Errorf("entry %d: unknown event %q", i, e.Event))
		}
	}
	bySession := map[string][]span{}
	var sessions []string
	for _, s := range spans {
		if !s.ended {
			problems = append(problems, fmt.Errorf("attempt %q of session %q (worker %q, fence %q) started without an end", s.key.attempt, s.key.session, s.key.worker, s.key.fence))
			continue
		}
		if _, ok := bySession[s.key.session]; !ok {
			sessions = append(sessions, s.key.session)
		}
		bySession[s.key.session] = append(bySession[s.key.session], s)
	}
	for _, session := range sessions {
		runs := bySession[session]
		slices.SortStableFunc(runs, func(a, b span) int { return cmp.Compare(a.start, b.start) })
		// latest is the run, of those started so far, that ends last.
		latest := runs[0]
		for _, r := range runs[1:] {
			if r.start < latest.end || r.start == latest.start {
				problems = append(problems, fmt.Errorf("session %q: attempt %q (worker %q, fence %q) started at %d while attempt %q (worker %q, fence %q) ran from %d to %d",
					session, r.key.attempt, r.key.worker, r.key.fence, r.start,
					latest.key.attempt, latest.key.worker, latest.key.fence, latest.start, latest.end))
			}
			if r.end > latest.end {
				latest = r
			}
		}
	}
	return errors.Join(problems...)
}

// CheckReplays reports every attempt that started more than once, on any
// worker: the "never replayed" guarantee. It returns nil when none did.
func CheckReplays(entries []Entry) error {
	var problems []error
	starts := map[string]int{}
	for _, e := range entries {
		if e.Event != EventStart {
			continue
		}
		starts[e.Attempt]++
		if starts[e.Attempt] == 2 {
			problems = append(problems, fmt.Errorf("attempt %q of session %q started more than once", e.Attempt, e.Session))
		}
	}
	return errors.Join(problems...)
}

// CheckSteps checks the guarantee a paused process can put to the test: no
// run acts after a later run of its session has started. A run that was
// paused past its lease may still record its end when it wakes (its harness
// returns), but it must record no step: its lease check (harness.Run.Current)
// fails first. Entries are read in the order they were written (one file,
// appended). It returns nil when all is well.
func CheckSteps(entries []Entry) error {
	var problems []error
	latest := map[string]runKey{} // session -> the run that started last
	for i, e := range entries {
		k := runKey{e.Session, e.Attempt, e.Worker, e.Fence}
		switch e.Event {
		case EventStart:
			latest[e.Session] = k
		case EventStep:
			if cur, ok := latest[e.Session]; ok && cur != k {
				problems = append(problems, fmt.Errorf("entry %d: attempt %q (worker %q, fence %q) acted at step %d after attempt %q (worker %q, fence %q) of its session started",
					i, e.Attempt, e.Worker, e.Fence, e.Step, cur.attempt, cur.worker, cur.fence))
			}
		}
	}
	return errors.Join(problems...)
}
