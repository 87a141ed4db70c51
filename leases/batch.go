package leases

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the store's hot operations (accept, claim, finish, mark
// published) of many goroutines in shared pipelines: smart batching. An
// operation is a few commands built by its caller. While fewer than max
// pipelines are in flight the caller sends its own at once, on its own
// goroutine (no hand-off, so an idle store adds no latency); once max are in
// flight, operations queue, and whoever finishes a pipeline sends everything
// queued as the next one. Under load a round trip carries many operations:
// fewer system calls in this process and in redis-server, which reads and
// answers a pipeline in one go.
//
// Each operation keeps its own commands and errors: one operation's failure
// (a script error, NOSCRIPT) is not another's. A pipeline that go-redis
// retries after a network error is sent again whole; every batched operation
// is idempotent (accept answers a repeat from its record, claim carries a
// claim token, finish and mark published are first-writer-wins), as they
// were when each went alone.
type batcher struct {
	rdb redis.UniversalClient
	max int

	mu      sync.Mutex
	running int
	queue   []*batchOp
}

type batchOp struct {
	cmds []redis.Cmder
	done chan struct{}
}

// batchTimeout bounds a shared pipeline, whose callers may have different
// deadlines (each stops waiting at its own).
const batchTimeout = 10 * time.Second

// maxPipelines is how many shared pipelines a store keeps in flight.
const maxPipelines = 2

func newBatcher(rdb redis.UniversalClient, max int) *batcher {
	return &batcher{rdb: rdb, max: max}
}

// do sends cmds in a pipeline, alone or with other operations, and returns
// when they have run (each command holds its own result and error), or with
// ctx's error when ctx ends first (the commands may still run).
func (b *batcher) do(ctx context.Context, cmds ...redis.Cmder) error {
	b.mu.Lock()
	if b.running < b.max {
		b.running++
		b.mu.Unlock()
		b.exec(ctx, cmds)
		b.next()
		return nil
	}
	op := &batchOp{cmds: cmds, done: make(chan struct{})}
	b.queue = append(b.queue, op)
	b.mu.Unlock()
	select {
	case <-op.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next hands the pipeline slot just freed to what queued meanwhile: one
// pipeline of all of it, sent from a new goroutine so that the caller that
// freed the slot returns at once.
func (b *batcher) next() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.running--
		b.mu.Unlock()
		return
	}
	ops := b.queue
	b.queue = nil
	b.mu.Unlock()
	go func() {
		n := 0
		for _, op := range ops {
			n += len(op.cmds)
		}
		cmds := make([]redis.Cmder, 0, n)
		for _, op := range ops {
			cmds = append(cmds, op.cmds...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		b.exec(ctx, cmds)
		cancel()
		for _, op := range ops {
			close(op.done)
		}
		b.next()
	}()
}

// exec sends cmds as one pipeline; each command records its own outcome
// (go-redis sets a connection error on every command of the pipeline).
func (b *batcher) exec(ctx context.Context, cmds []redis.Cmder) {
	p := b.rdb.Pipeline()
	for _, c := range cmds {
		_ = p.Process(ctx, c)
	}
	_, _ = p.Exec(ctx)
}

// evalSha builds an EVALSHA of sc, as go-redis's Script.EvalSha does, without
// sending it.
func evalSha(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", sc.Hash(), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// script runs sc through the batcher, in one pipeline after the commands
// ahead (each keeps its own result); when Redis forgot the script (a
// restart) it sends it again with its body, alone. When the pipeline could
// not be waited for (ctx ended), the script's command carries the error.
func (s *Store) script(ctx context.Context, ahead []redis.Cmder, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := evalSha(ctx, sc, keys, args...)
	if err := s.batch.do(ctx, append(ahead, cmd)...); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	if isNoScript(cmd.Err()) {
		return sc.Eval(ctx, s.rdb, keys, args...)
	}
	return cmd
}
