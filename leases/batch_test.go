package leases

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// gate is a go-redis hook that holds every pipeline while closed, so a test
// can fill the batcher's pipeline slots and queue operations behind them.
type gate struct {
	mu    sync.Mutex
	open  chan struct{}
	pipes int
	cmds  []int // commands per pipeline, in order
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) release() { close(g.open) }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && (cmds[0].Name() == "hello" || cmds[0].Name() == "client") {
			return next(ctx, cmds) // a new connection's set-up
		}
		g.mu.Lock()
		g.pipes++
		g.cmds = append(g.cmds, len(cmds))
		g.mu.Unlock()
		<-g.open
		return next(ctx, cmds)
	}
}

func (g *gate) counts() (int, []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pipes, append([]int(nil), g.cmds...)
}

// waitFor polls cond (the batcher's state, read under its lock) for up to 5 s.
func waitFor(t *testing.T, b *batcher, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		ok := cond()
		b.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// gated is a store whose pipelines wait at a closed gate, every pipeline
// slot taken by an accept.
type gated struct {
	s    *Store
	g    *gate
	wg   sync.WaitGroup
	errs chan error
}

// newGated starts one accept per pipeline slot and waits until each holds a
// slot at the gate; room is how many more accepts the test will add.
func newGated(t *testing.T, room int) *gated {
	t.Helper()
	x := &gated{s: newStore(t), g: newGate()}
	x.s.rdb.(*redis.Client).AddHook(x.g)
	x.errs = make(chan error, x.s.batch.max+room)
	for i := 0; i < x.s.batch.max; i++ {
		x.goAccept(fmt.Sprintf("slot-%d", i), nil)
	}
	waitFor(t, x.s.batch, "the pipeline slots to fill", func() bool { return x.s.batch.running == x.s.batch.max })
	return x
}

// goAccept accepts session's first attempt in a goroutine; out, when set,
// receives the answer.
func (x *gated) goAccept(session string, out *Accepted) {
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		a, err := x.s.Accept(ctx, AcceptArgs{SessionKey: session, AttemptID: session + "-a1",
			HarnessID: "codex", ReplyTo: "_INBOX.x", QueueTimeout: time.Minute, RunBudget: time.Minute, Reply: []byte(`{"v":1}`)})
		if out != nil {
			*out = a
		}
		x.errs <- err
	}()
}

// release opens the gate and checks that every accept succeeded.
func (x *gated) release(t *testing.T) {
	t.Helper()
	x.g.release()
	x.wg.Wait()
	close(x.errs)
	for err := range x.errs {
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	}
}

func TestQueuedOperationsShareOnePipeline(t *testing.T) {
	const queued = 50
	x := newGated(t, queued)
	results := make([]Accepted, queued)
	for i := range queued {
		x.goAccept(fmt.Sprintf("q-%d", i), &results[i])
	}
	waitFor(t, x.s.batch, "the accepts to queue", func() bool { return len(x.s.batch.queue) == queued })
	x.release(t)

	// One pipeline per slot, then one for everything that queued: the first
	// slot to free takes the whole queue.
	slots := x.s.batch.max
	pipes, cmds := x.g.counts()
	if pipes != slots+1 {
		t.Fatalf("%d accepts took %d pipelines (commands each: %v); want %d", queued+slots, pipes, cmds, slots+1)
	}
	if last := cmds[len(cmds)-1]; last != 3*queued {
		t.Fatalf("the shared pipeline held %d commands, want %d (3 per accept)", last, 3*queued)
	}
	// Each caller got its own answer, and each attempt is recorded.
	for i, r := range results {
		if !r.New || r.State != StateAccepted {
			t.Fatalf("accept %d: %+v, want a new accepted attempt", i, r)
		}
		order, err := x.s.order(ctx, fmt.Sprintf("q-%d", i))
		if err != nil || len(order) != 1 || order[0] != fmt.Sprintf("q-%d-a1", i) {
			t.Fatalf("order of q-%d: %v %v", i, order, err)
		}
	}
}

func TestOneOperationsErrorStaysItsOwn(t *testing.T) {
	x := newGated(t, 1)
	failing := redis.NewScript(`return redis.error_reply("ERR boom")`)
	if err := failing.Load(ctx, x.s.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	var failed error
	done := make(chan struct{})
	go func() { defer close(done); failed = x.s.script(ctx, nil, failing, []string{"teamster:{x}:k"}).Err() }()
	var ok Accepted
	x.goAccept("fine", &ok)
	waitFor(t, x.s.batch, "both operations to queue", func() bool { return len(x.s.batch.queue) == 2 })
	x.release(t) // fails the test if the accept that shared the pipeline failed
	<-done
	if failed == nil || !redis.HasErrorPrefix(failed, "boom") {
		t.Fatalf("the failing script returned %v, want its own error", failed)
	}
	if !ok.New {
		t.Fatalf("the accept that shared its pipeline: %+v; want accepted", ok)
	}
}

func TestQueuedOperationStopsAtItsDeadline(t *testing.T) {
	x := newGated(t, 0)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := x.s.Accept(short, AcceptArgs{SessionKey: "late", AttemptID: "late-a1", HarnessID: "codex", ReplyTo: "_INBOX.x",
		QueueTimeout: time.Minute, RunBudget: time.Minute, Reply: []byte(`{"v":1}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a queued accept past its deadline returned %v, want context.DeadlineExceeded", err)
	}
	x.release(t)
	// The abandoned accept still runs (in the pipeline after the gate), and
	// the batcher goes idle; an operation then goes straight through.
	waitFor(t, x.s.batch, "the batcher to go idle", func() bool { return x.s.batch.running == 0 && len(x.s.batch.queue) == 0 })
	accept(t, x.s, "after", "after-a1", time.Minute)
}

func TestBatchedScriptsSurviveAScriptFlush(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 10*time.Second, nil)
	if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	accept(t, s, "flushed", "flushed-a1", time.Minute)
	if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l := mustClaim(t, k, "flushed", "flushed-a1")
	if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := l.Finish(ctx, Outcome{Code: OutcomeOK, Result: []byte(`{"v":1}`)})
	if err != nil || st != Finished {
		t.Fatalf("finish after SCRIPT FLUSH: %s %v", st, err)
	}
	if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkPublished(ctx, "flushed", "flushed-a1", "test"); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Attempt(ctx, "flushed", "flushed-a1")
	if err != nil || rec.State != StateFinished || !rec.Published {
		t.Fatalf("record after the flushes: %+v %v", rec, err)
	}
}

// go-redis re-sends a whole pipeline after a network error, and a shared
// pipeline carries other callers' operations: sending one twice must leave
// what sending it once does. An accept is appended once, a claim keeps its
// one fence (its claim token), and the session's fence counter moves once.
func TestASharedPipelineSentTwiceActsOnce(t *testing.T) {
	s := newStore(t)
	accept(t, s, "r2", "r2-a1", time.Minute) // queued, to be claimed in the pipeline
	k1, k2 := keysFor("r1"), keysFor("r2")
	cmds := []redis.Cmder{
		redis.NewBoolCmd(ctx, "set", attemptIDKey("r1-a1"), k1.tag, "px", 60000, "nx"),
		redis.NewIntCmd(ctx, "zadd", k1.index(), "nx", 1, indexMember(k1.tag, "r1-a1")),
		evalSha(ctx, acceptScript, []string{k1.attempt("r1-a1"), k1.order()},
			"r1-a1", 60000, 120000, "digest-r1", "harness", "codex", "replyTo", "_INBOX.x", "reply", `{"v":1}`),
		evalSha(ctx, claimScript, []string{k2.order(), k2.attempt("r2-a1"), k2.lease(), k2.fence(), k2.session(), k2.node()},
			"r2-a1", "w1", 5000, newEpoch(), SeqReservation, k2.prefix(), FinishedTTL.Milliseconds(), "tok-1", 0, "codex"),
	}
	s.batch.exec(ctx, cmds)
	first, err := cmds[3].(*redis.Cmd).StringSlice()
	if err != nil || first[0] != "claimed" {
		t.Fatalf("claim in the first send: %q %v", first, err)
	}
	s.batch.exec(ctx, cmds) // the re-send
	for i, c := range cmds {
		if c.Err() != nil {
			t.Fatalf("command %d in the re-send: %v", i, c.Err())
		}
	}
	again, _ := cmds[3].(*redis.Cmd).StringSlice()
	if again[0] != "claimed" || again[1] != first[1] {
		t.Fatalf("claim in the re-send %q, want the same claim %q", again, first[1])
	}
	if order, _ := s.order(ctx, "r1"); len(order) != 1 || order[0] != "r1-a1" {
		t.Fatalf("order of r1 after the re-send: %v, want r1-a1 once", order)
	}
	if lease, err := s.LeaseOf(ctx, "r2"); err != nil || lease.Fence != first[1] {
		t.Fatalf("lease of r2 %+v %v, want fence %s", lease, err, first[1])
	}
	if _, n := parseFence(t, first[1]); n != 1 {
		t.Fatalf("fence %s: the session's first fence should be :1", first[1])
	}
	if n, _ := s.rdb.HGet(ctx, k2.fence(), "n").Int(); n != 1 {
		t.Fatalf("fence counter %d after the re-send, want 1", n)
	}
}
