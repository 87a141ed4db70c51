package injection

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/teamster-fleet/teamster"
)

// guard bounds every wait of these tests, so that a bug fails a test instead
// of hanging it; no test measures time.
const guard = 10 * time.Second

// call is one physical write, answered by the test.
type call struct {
	ctx   context.Context
	items []Item
	reply chan error
}

func (c call) texts() []string {
	out := make([]string, len(c.items))
	for i, it := range c.items {
		out[i] = it.Text
	}
	return out
}

// env is a batch whose writes the test answers one by one, on a fake clock.
type env struct {
	t      *testing.T
	clock  *clockwork.FakeClock
	calls  chan call
	b      *Batch
	mu     sync.Mutex
	inputs map[string]*callbacks
}

func newEnv(t *testing.T, o BatchOptions) *env {
	t.Helper()
	e := &env{t: t, clock: clockwork.NewFakeClock(), calls: make(chan call), inputs: map[string]*callbacks{}}
	o.Clock = e.clock
	e.b = NewBatch(e.write, o)
	t.Cleanup(func() { // cancels a write left unanswered by a failed test
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		e.b.Close(ctx)
	})
	return e
}

func (e *env) write(ctx context.Context, items []Item) error {
	c := call{ctx: ctx, items: items, reply: make(chan error, 1)}
	select {
	case e.calls <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the next write.
func (e *env) next() call {
	e.t.Helper()
	select {
	case c := <-e.calls:
		return c
	case <-time.After(guard):
		e.t.Fatal("no write")
		return call{}
	}
}

// noWrite fails if a write is waiting to be answered.
func (e *env) noWrite() {
	e.t.Helper()
	select {
	case c := <-e.calls:
		e.t.Fatalf("unexpected write of %q", c.texts())
	default:
	}
}

// expect takes the next write, checks its texts and answers it with err.
func (e *env) expect(want []string, err error) {
	e.t.Helper()
	c := e.next()
	if diff := cmp.Diff(want, c.texts()); diff != "" {
		e.t.Fatalf("written texts (-want +got):\n%s", diff)
	}
	c.reply <- err
}

// add queues text under assert with kind run and fails on a refusal.
func (e *env) add(text string, assert AssertFunc) {
	e.t.Helper()
	if err := e.b.Add(text, e.opts(text), assert, KindRun); err != nil {
		e.t.Fatalf("Add(%q): %v", text, err)
	}
}

func (e *env) opts(text string) QueueOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := &callbacks{}
	e.inputs[text] = c
	return c.opts()
}

// flush starts a Flush and returns a wait for it.
func (e *env) flush() (wait func()) {
	done := make(chan error, 1)
	go func() { done <- e.b.Flush(context.Background()) }()
	return func() {
		e.t.Helper()
		select {
		case err := <-done:
			if err != nil {
				e.t.Fatalf("Flush: %v", err)
			}
		case <-time.After(guard):
			e.t.Fatal("Flush did not return")
		}
	}
}

// advance moves the clock by d once the batch's loop waits on it.
func (e *env) advance(d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := e.clock.BlockUntilContext(ctx, 1); err != nil {
		e.t.Fatal("the batch never waited on its clock")
	}
	e.clock.Advance(d)
}

// close closes the batch, waiting for a write in flight.
func (e *env) close() {
	e.t.Helper()
	if err := e.b.Close(context.Background()); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
}

// events returns every input's callbacks so far.
func (e *env) events() map[string][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][]string{}
	for text, c := range e.inputs {
		out[text] = c.get()
	}
	return out
}

// check compares every input's callbacks with want.
func (e *env) check(want map[string][]string) {
	e.t.Helper()
	if diff := cmp.Diff(want, e.events()); diff != "" {
		e.t.Fatalf("callbacks (-want +got):\n%s", diff)
	}
}

// waitSettled waits until text's input has been settled.
func (e *env) waitSettled(text string) {
	e.t.Helper()
	e.mu.Lock()
	c := e.inputs[text]
	e.mu.Unlock()
	select {
	case <-c.settledCh():
	case <-time.After(guard):
		e.t.Fatalf("%q never settled", text)
	}
}

func always() bool { return true }

func admitted(s Settlement) []string { return []string{"accepted:true", string(s)} }

func TestBatchWritesTogetherAfterDebounce(t *testing.T) {
	e := newEnv(t, BatchOptions{Debounce: time.Second})
	e.add("a", always)
	e.add("b", always)
	e.add("c", always)
	e.advance(time.Second - time.Millisecond)
	e.noWrite()
	e.clock.Advance(time.Millisecond)
	e.expect([]string{"a", "b", "c"}, nil)
	e.close()
	e.check(map[string][]string{"a": admitted(Committed), "b": admitted(Committed), "c": admitted(Committed)})
}

func TestBatchItemDebounceShortensTheWait(t *testing.T) {
	e := newEnv(t, BatchOptions{Debounce: time.Hour})
	e.add("slow", always)
	opts := e.opts("quick")
	opts.DebounceMs = 1000
	if err := e.b.Add("quick", opts, always, KindRun); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Second)
	e.expect([]string{"slow", "quick"}, nil)
	e.close()
	e.check(map[string][]string{"slow": admitted(Committed), "quick": admitted(Committed)})
}

func TestBatchMaxItemsWritesAtOnce(t *testing.T) {
	e := newEnv(t, BatchOptions{Debounce: time.Hour, MaxItems: 2})
	e.add("a", always)
	e.add("b", always)
	e.expect([]string{"a", "b"}, nil) // no clock advance: the cap triggers the write
	e.add("c", always)
	e.advance(time.Hour)
	e.expect([]string{"c"}, nil)
	e.close()
	e.check(map[string][]string{"a": admitted(Committed), "b": admitted(Committed), "c": admitted(Committed)})
}

func TestBatchDropsRevokedItemAndWritesTheOthers(t *testing.T) {
	e := newEnv(t, BatchOptions{Debounce: time.Second})
	b := NewLatch(always)
	e.add("a", always)
	e.add("b", b.Assert())
	e.add("c", always)
	b.Revoke() // between queueing and the write
	e.advance(time.Second)
	e.expect([]string{"a", "c"}, nil)
	e.close()
	e.check(map[string][]string{"a": admitted(Committed), "b": admitted(Rejected), "c": admitted(Committed)})
}

func TestBatchRetryRechecksEveryItem(t *testing.T) {
	e := newEnv(t, BatchOptions{Debounce: time.Hour, Retry: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }})
	b := NewLatch(always)
	e.add("a", always)
	e.add("b", b.Assert())
	e.add("c", always)
	wait := e.flush()
	e.expect([]string{"a", "b", "c"}, errors.New("busy"))
	b.Revoke() // between attempt 1 and the retry
	e.advance(time.Second)
	e.expect([]string{"a", "c"}, nil)
	wait()
	e.check(map[string][]string{"a": admitted(Committed), "b": admitted(Rejected), "c": admitted(Committed)})
}

func TestBatchUnknownOutcomeIsNeverReplayed(t *testing.T) {
	e := newEnv(t, BatchOptions{Retry: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
	e.add("a", always)
	wait := e.flush()
	e.expect([]string{"a"}, fmt.Errorf("connection dropped after send: %w", ErrOutcomeUnknown))
	wait()
	e.add("b", always)
	wait = e.flush()
	e.expect([]string{"b"}, errors.New("busy")) // a retry of b alone
	e.expect([]string{"b"}, nil)
	wait()
	e.close()
	e.check(map[string][]string{"a": admitted(Unconfirmed), "b": admitted(Committed)})
}

// TestBatchSettlesOncePerPath drives one input down each path and checks that
// it is settled exactly once, after its admission.
func TestBatchSettlesOncePerPath(t *testing.T) {
	stop := func() backoff.BackOff { return &backoff.StopBackOff{} }
	second := func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }
	for _, tc := range []struct {
		name  string
		retry func() backoff.BackOff
		drive func(e *env)
		want  []string
	}{
		{"committed", nil, func(e *env) {
			e.add("x", always)
			wait := e.flush()
			e.expect([]string{"x"}, nil)
			wait()
		}, admitted(Committed)},
		{"permanent error", nil, func(e *env) {
			e.add("x", always)
			wait := e.flush()
			e.expect([]string{"x"}, backoff.Permanent(errors.New("refused")))
			wait()
		}, admitted(Rejected)},
		{"retries exhausted", stop, func(e *env) {
			e.add("x", always)
			wait := e.flush()
			e.expect([]string{"x"}, errors.New("busy"))
			wait()
		}, admitted(Rejected)},
		{"unknown outcome", nil, func(e *env) {
			e.add("x", always)
			wait := e.flush()
			e.expect([]string{"x"}, ErrOutcomeUnknown)
			wait()
		}, admitted(Unconfirmed)},
		{"revoked before the write", nil, func(e *env) {
			l := NewLatch(always)
			e.add("x", l.Assert())
			l.Revoke()
			e.flush()() // nothing left to write
			e.noWrite()
		}, admitted(Rejected)},
		{"cancelled at close", nil, func(e *env) {
			e.add("x", always)
			e.close()
		}, admitted(Cancelled)},
		{"close waits for the write in flight", nil, func(e *env) {
			e.add("x", always)
			e.flush()
			c := e.next()
			closed := make(chan error, 1)
			go func() { closed <- e.b.Close(context.Background()) }()
			c.reply <- nil
			if err := <-closed; err != nil {
				e.t.Fatal(err)
			}
		}, admitted(Committed)},
		{"run ends during the write", nil, func(e *env) {
			e.add("x", always)
			e.flush()
			e.next() // never answered: the write ends with its context
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := e.b.Close(ctx); !errors.Is(err, context.Canceled) {
				e.t.Fatalf("Close = %v, want context.Canceled", err)
			}
			e.waitSettled("x")
		}, admitted(Cancelled)},
		{"run ends while waiting to retry", second, func(e *env) {
			e.add("x", always)
			e.flush()
			e.expect([]string{"x"}, errors.New("busy"))
			if err := e.clock.BlockUntilContext(context.Background(), 1); err != nil {
				e.t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			e.b.Close(ctx)
			e.waitSettled("x")
		}, admitted(Cancelled)},
		{"refused: assertion false", nil, func(e *env) {
			err := e.b.Add("x", e.opts("x"), func() bool { return false }, KindSourceBound)
			if !errors.Is(err, teamster.ErrSourceRevoked) {
				e.t.Fatalf("Add = %v, want source_revoked", err)
			}
		}, []string{string(Rejected)}},
		{"refused: no assertion", nil, func(e *env) {
			err := e.b.Add("x", e.opts("x"), nil, KindRun)
			if !errors.Is(err, teamster.ErrNoActiveRun) {
				e.t.Fatalf("Add = %v, want no_active_run", err)
			}
		}, []string{string(Rejected)}},
		{"refused: unknown kind", nil, func(e *env) {
			err := e.b.Add("x", e.opts("x"), always, Kind("steer"))
			if !errors.Is(err, teamster.ErrInvalidRequest) {
				e.t.Fatalf("Add = %v, want invalid_request", err)
			}
		}, []string{string(Rejected)}},
		{"refused: added after close", nil, func(e *env) {
			e.close()
			err := e.b.Add("x", e.opts("x"), always, KindRun)
			if !errors.Is(err, teamster.ErrNoActiveRun) {
				e.t.Fatalf("Add = %v, want no_active_run", err)
			}
			if err := e.b.Flush(context.Background()); !errors.Is(err, teamster.ErrNoActiveRun) {
				e.t.Fatalf("Flush after Close = %v, want no_active_run", err)
			}
		}, []string{string(Rejected)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, BatchOptions{Retry: tc.retry, Debounce: time.Hour})
			tc.drive(e)
			e.b.Close(context.Background())
			e.noWrite()
			e.check(map[string][]string{"x": tc.want})
		})
	}
}

// TestBatchSettlementWaitsForAdmission writes and settles an input while its
// OnQueueAccepted is still running (and calling back into the batch): the
// settlement must come after the admission.
func TestBatchSettlementWaitsForAdmission(t *testing.T) {
	var written atomic.Int32
	b := NewBatch(func(ctx context.Context, items []Item) error {
		written.Add(int32(len(items)))
		return nil
	}, BatchOptions{Clock: clockwork.NewFakeClock()})
	defer b.Close(context.Background())
	var c callbacks
	opts := c.opts()
	accepted := opts.OnQueueAccepted
	opts.OnQueueAccepted = func(ok bool) {
		if err := b.Flush(context.Background()); err != nil { // the input is written and settled here
			t.Error(err)
		}
		if written.Load() != 1 {
			t.Error("input not written during OnQueueAccepted")
		}
		accepted(ok)
	}
	if err := b.Add("x", opts, always, KindRun); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(admitted(Committed), c.get()); diff != "" {
		t.Fatalf("callbacks (-want +got):\n%s", diff)
	}
}

// TestBatchConcurrent adds from many goroutines while flushes, revocations,
// failures and unknown outcomes happen, then checks every input's history.
func TestBatchConcurrent(t *testing.T) {
	type write struct {
		texts []string
		err   error
	}
	var (
		mu     sync.Mutex
		writes []write
		rng    = rand.New(rand.NewPCG(1, 2))
	)
	outcomes := []error{nil, nil, nil, errors.New("busy"), ErrOutcomeUnknown, backoff.Permanent(errors.New("refused"))}
	b := NewBatch(func(ctx context.Context, items []Item) error {
		mu.Lock()
		defer mu.Unlock()
		w := write{err: outcomes[rng.IntN(len(outcomes))]}
		for _, it := range items {
			w.texts = append(w.texts, it.Text)
		}
		writes = append(writes, w)
		return w.err
	}, BatchOptions{
		MaxItems: 3,
		Retry:    func() backoff.BackOff { return backoff.WithMaxRetries(&backoff.ZeroBackOff{}, 2) },
		Clock:    clockwork.NewFakeClock(),
	})

	const adders, perAdder = 16, 50
	var (
		inputs  sync.Map // text -> *callbacks
		latches sync.Map // text -> *Latch
		refused sync.Map // text -> true
		wg      sync.WaitGroup
	)
	stopFlushing := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Add(1)
	go func() {
		defer flusher.Done()
		for {
			select {
			case <-stopFlushing:
				return
			default:
			}
			b.Flush(context.Background())
			latches.Range(func(k, v any) bool {
				if len(k.(string))%7 == 0 {
					v.(*Latch).Revoke()
				}
				return true
			})
		}
	}()
	for g := range adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAdder {
				text := fmt.Sprintf("g%d-%d", g, i)
				c := &callbacks{}
				inputs.Store(text, c)
				l := NewLatch(always)
				latches.Store(text, l)
				if i%11 == 0 {
					l.Revoke()
				}
				if err := b.Add(text, c.opts(), l.Assert(), KindSourceBound); err != nil {
					refused.Store(text, true)
				}
			}
		}()
	}
	wg.Wait()
	close(stopFlushing)
	flusher.Wait()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// last is the outcome of each text's last write, and ended counts the
	// writes that carried it and did not fail with a retryable error.
	last := map[string]error{}
	ended := map[string]int{}
	for _, w := range writes {
		for _, text := range w.texts {
			if ended[text] > 0 {
				t.Errorf("%s written again after a write that committed, refused or lost it", text)
			}
			last[text] = w.err
			if w.err == nil || errors.Is(w.err, ErrOutcomeUnknown) || errors.Is(w.err, &backoff.PermanentError{}) {
				ended[text]++
			}
		}
	}
	// allowed is what an input may be settled as, given its last write.
	allowed := func(err error, written bool) []Settlement {
		switch {
		case !written:
			return []Settlement{Rejected, Cancelled} // revoked, or still waiting at Close
		case err == nil:
			return []Settlement{Committed}
		case errors.Is(err, ErrOutcomeUnknown):
			return []Settlement{Unconfirmed}
		default:
			return []Settlement{Rejected} // refused, retries exhausted, or revoked before a retry
		}
	}
	n := 0
	seen := map[Settlement]int{}
	inputs.Range(func(k, v any) bool {
		n++
		text, got := k.(string), v.(*callbacks).get()
		if _, ok := refused.Load(text); ok {
			if diff := cmp.Diff([]string{string(Rejected)}, got); diff != "" {
				t.Errorf("%s refused: callbacks (-want +got):\n%s", text, diff)
			}
			return true
		}
		if len(got) != 2 || got[0] != "accepted:true" {
			t.Errorf("%s: callbacks %q, want accepted:true then one settlement", text, got)
			return true
		}
		s := Settlement(got[1])
		seen[s]++
		err, written := last[text]
		if ok := allowed(err, written); !slices.Contains(ok, s) {
			t.Errorf("%s settled %s, want one of %v (last write: %v, written: %v)", text, s, ok, err, written)
		}
		return true
	})
	if n != adders*perAdder {
		t.Fatalf("%d inputs, want %d", n, adders*perAdder)
	}
	for _, s := range []Settlement{Committed, Unconfirmed, Rejected} {
		if seen[s] == 0 {
			t.Errorf("no input settled %s: the test did not exercise that path", s)
		}
	}
	t.Logf("%d writes, settlements %v", len(writes), seen)
}
