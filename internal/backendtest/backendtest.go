// Package backendtest gives a test of one component (a router's reaper, a
// worker's delivery) the real backends it talks to: an embedded NATS with
// teamster's streams and bucket set up, and a private redis-server with the
// leases scripts loaded. Whole fleets are internal/fleettest's.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/leases"
)

// Backends are one test's NATS and Redis.
type Backends struct {
	NC    *nats.Conn
	JS    jetstream.JetStream
	Store *leases.Store
	// Log discards what it is given.
	Log *logrus.Logger

	lost *loseMarkReply
}

// Start starts both for t; they stop when t ends.
func Start(t testing.TB) *Backends {
	t.Helper()
	nc, js := testenv.NewNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.NewRedis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	lost := &loseMarkReply{}
	rdb.AddHook(lost)
	store := leases.NewStore(rdb)
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &Backends{NC: nc, JS: js, Store: store, Log: log, lost: lost}
}

// LoseNextMarkReply makes the next mark published run in Redis and then fail
// with an error, as a connection cut after the command ran would. The
// function it returns reports whether a reply was lost since. A mark is
// recognised by its shape: a pipeline of the reaper index's ZADD and one
// EVALSHA of one attempt record key and one argument (the marker token); the
// sent confirmation has the same script shape but goes with a ZREM.
func (b *Backends) LoseNextMarkReply() (lost func() bool) {
	b.lost.fired.Store(false)
	b.lost.armed.Store(true)
	return b.lost.fired.Load
}

// loseMarkReply is LoseNextMarkReply's go-redis hook.
type loseMarkReply struct {
	armed, fired atomic.Bool
}

func (h *loseMarkReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseMarkReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *loseMarkReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil || !isMark(cmds) || !h.armed.CompareAndSwap(true, false) {
			return err
		}
		h.fired.Store(true)
		lost := errors.New("connection reset after the command ran (injected)")
		for _, c := range cmds {
			c.SetErr(lost)
		}
		return lost
	}
}

func isMark(cmds []redis.Cmder) bool {
	if len(cmds) != 2 || cmds[0].Name() != "zadd" || cmds[1].Name() != "evalsha" {
		return false
	}
	args := cmds[1].Args()
	if len(args) != 5 || fmt.Sprint(args[2]) != "1" {
		return false
	}
	key, _ := args[3].(string)
	return strings.Contains(key, ":attempt:")
}

// AgeMark moves the time of an attempt's mark published back by d, as if the
// mark had been made d earlier: how a test lets a send window pass without
// waiting for it.
func (b *Backends) AgeMark(t testing.TB, sessionKey, attemptID string, d time.Duration) {
	t.Helper()
	key := "teamster:{" + leases.Tag(sessionKey) + "}:attempt:" + attemptID
	at, err := b.Store.Client().HGet(context.Background(), key, "pubat").Int64()
	if err != nil {
		t.Fatalf("age the mark of %s: %v", attemptID, err)
	}
	if err := b.Store.Client().HSet(context.Background(), key, "pubat", at-d.Milliseconds()).Err(); err != nil {
		t.Fatal(err)
	}
}

// ResultEvents counts the result events sent under prefix (subjects
// prefix.>), by attempt id. The function it returns waits until what was
// sent so far has arrived, then returns the counts and starts over.
func (b *Backends) ResultEvents(t testing.TB, prefix string) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	sub, err := b.NC.Subscribe(prefix+".>", func(m *nats.Msg) {
		var e bus.Event
		if bus.Decode(m.Data, &e) == nil && e.Type == bus.EventResult {
			mu.Lock()
			counts[e.AttemptID]++
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() map[string]int {
		t.Helper()
		if err := b.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // a later event would have arrived by now
		mu.Lock()
		defer mu.Unlock()
		got := counts
		counts = map[string]int{}
		return got
	}
}
