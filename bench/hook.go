package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// rtCounter is a go-redis hook that counts round trips: a single command is
// one, a pipeline is one however many commands it carries. It also counts
// round trips by kind, naming each script call by the key layout it was given
// (which identifies teamster's scripts: accept, claim, finish, ...), so the
// report can say what the code really does per attempt.
type rtCounter struct {
	trips atomic.Int64 // round trips
	cmds  atomic.Int64 // commands, including those inside pipelines
	wait  atomic.Int64 // nanoseconds callers spent in round trips (pool wait included)
	kinds sync.Map     // round trip kind -> *atomic.Int64
	// ops counts commands by kind (a script by its name): under load one
	// round trip carries the commands of many operations (leases' batcher).
	ops sync.Map
	// scripts caches a script's kind by its SHA.
	scripts sync.Map

	// While record is set, each round trip's duration is kept by kind.
	record  atomic.Bool
	mu      sync.Mutex
	samples map[string]latencies
}

func (c *rtCounter) reset() {
	c.trips.Store(0)
	c.cmds.Store(0)
	c.wait.Store(0)
	c.kinds.Range(func(k, _ any) bool { c.kinds.Delete(k); return true })
	c.ops.Range(func(k, _ any) bool { c.ops.Delete(k); return true })
	c.mu.Lock()
	c.samples = nil
	c.mu.Unlock()
}

// p50s lists the recorded round trips' p50 by kind, most frequent first.
func (c *rtCounter) p50s() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	kinds := make([]string, 0, len(c.samples))
	for k := range c.samples {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if d := len(c.samples[b]) - len(c.samples[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %s", k, c.samples[k].pct(50).Round(time.Microsecond)))
	}
	return strings.Join(parts, ", ")
}

func (c *rtCounter) add(kind string, cmds int) {
	c.trips.Add(1)
	c.cmds.Add(int64(cmds))
	count(&c.kinds, kind)
}

func count(m *sync.Map, kind string) {
	v, ok := m.Load(kind)
	if !ok {
		v, _ = m.LoadOrStore(kind, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// timed runs a round trip of kind and adds its duration to wait.
func (c *rtCounter) timed(kind string, f func() error) error {
	t0 := time.Now()
	err := f()
	d := time.Since(t0)
	c.wait.Add(int64(d))
	if c.record.Load() {
		c.mu.Lock()
		if c.samples == nil {
			c.samples = map[string]latencies{}
		}
		c.samples[kind] = append(c.samples[kind], d)
		c.mu.Unlock()
	}
	return err
}

// breakdown lists round trips by kind divided by per, most frequent first.
func (c *rtCounter) breakdown(per float64) string { return perKind(&c.kinds, per) }

// opBreakdown lists commands by kind divided by per, most frequent first.
func (c *rtCounter) opBreakdown(per float64) string { return perKind(&c.ops, per) }

func perKind(m *sync.Map, per float64) string {
	type kv struct {
		k string
		n int64
	}
	var all []kv
	m.Range(func(k, v any) bool {
		all = append(all, kv{k.(string), v.(*atomic.Int64).Load()})
		return true
	})
	slices.SortFunc(all, func(a, b kv) int {
		if a.n != b.n {
			return int(b.n - a.n)
		}
		return strings.Compare(a.k, b.k)
	})
	parts := make([]string, 0, len(all))
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.n)/per))
	}
	return strings.Join(parts, ", ")
}

func (c *rtCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if connSetup(cmd) {
			return next(ctx, cmd)
		}
		kind := c.cmdKind(cmd)
		c.add(kind, 1)
		count(&c.ops, kind)
		return c.timed(kind, func() error { return next(ctx, cmd) })
	}
}

func (c *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && connSetup(cmds[0]) {
			return next(ctx, cmds)
		}
		var kinds []string
		for _, cmd := range cmds {
			k := c.cmdKind(cmd)
			count(&c.ops, k)
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
		kind := "pipeline[" + strings.Join(kinds, "+") + "]"
		c.add(kind, len(cmds))
		return c.timed(kind, func() error { return next(ctx, cmds) })
	}
}

// connSetup tells the commands go-redis sends when it dials a pooled
// connection (HELLO, CLIENT SETINFO, ...): they belong to the pool, not to the
// operation being counted.
func connSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// scriptByKeys names teamster's scripts (leases/scripts.go) by the kinds of
// the keys they are called with. (unaccept shares accept's layout; it runs
// only when a publish fails, which the report would show as errors. The mark
// published and its sent confirmation share one layout, a record key alone:
// one kind, about two per result.)
var scriptByKeys = map[string]string{
	"attempt,order":                          "accept",
	"order,attempt,lease,fence,session,node": "claim",
	"order,attempt,lease,fence,session":      "claim", // before the per-slot node marker
	"lease,attempt":                          "renew",
	"order,attempt,lease,session":            "finish",
	"order,attempt,lease":                    "abandon",
	"attempt":                                "mark+sent",
	"lease":                                  "release",
	"lease,session":                          "writeSession",
	"fence":                                  "epoch",
	"due":                                    "reaperDue",
	"node":                                   "markNode",
}

// cmdKind is the command's name, or for a script call the script's name,
// worked out once per script (by its SHA) so that counting costs the
// measured fleet little.
func (c *rtCounter) cmdKind(cmd redis.Cmder) string {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return name
	}
	args := cmd.Args()
	if len(args) < 3 {
		return name
	}
	sha, _ := args[1].(string)
	if name == "evalsha" {
		if k, ok := c.scripts.Load(sha); ok {
			return k.(string)
		}
	}
	k := scriptKind(args)
	if name == "evalsha" {
		c.scripts.Store(sha, k)
	}
	return k
}

// scriptKind names a script call by the kinds of the keys it was given.
func scriptKind(args []any) string {
	n := 0
	switch v := args[2].(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	}
	kinds := make([]string, 0, n)
	for i := 0; i < n && 3+i < len(args); i++ {
		k, _ := args[3+i].(string)
		kinds = append(kinds, keyKind(k))
	}
	sig := strings.Join(kinds, ",")
	if s, ok := scriptByKeys[sig]; ok {
		return s
	}
	return "script(" + sig + ")"
}

// keyKind is the kind of a teamster key: teamster:{s}:attempt:<id> is
// "attempt", teamster:{s}:lease is "lease".
func keyKind(k string) string {
	if i := strings.Index(k, "}:"); i >= 0 {
		k = k[i+2:]
		if j := strings.IndexByte(k, ':'); j >= 0 {
			k = k[:j]
		}
		return k
	}
	return k
}
