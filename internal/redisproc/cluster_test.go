package redisproc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startClusterT starts a Cluster that the test closes when it ends.
func startClusterT(t *testing.T, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := StartCluster(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// shardOf is the shard whose first master serves key.
func shardOf(t *testing.T, ctx context.Context, c *Cluster, rdb *redis.ClusterClient, key string) int {
	t.Helper()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	addr, err := c.MasterOf(ctx, int(slot))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < clusterShards; i++ {
		if c.Proxy(i).Addr() == addr {
			return i
		}
	}
	t.Fatalf("slot %d served by %s, no first master", slot, addr)
	return -1
}

// A write acknowledged while the shard's replication is frozen is lost when
// its master dies: through a cluster-mode client after the failover, the
// write from before the freeze is there and the frozen one is not; the
// replica serves the shard's slots, and the killed master rejoins as its
// replica.
func TestClusterFailoverLosesTheFrozenWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := startClusterT(t, ClusterOptions{})
	rdb := c.Client()
	defer rdb.Close()
	const kept, lost = "{shard}kept", "{shard}lost" // one slot
	i := shardOf(t, ctx, c, rdb, kept)

	// The first write reaches the replica: WAIT on the connection that
	// wrote it, to the master through its proxy.
	m := clientT(t, &redis.Options{Addr: c.Proxy(i).Addr()})
	pipe := m.Pipeline()
	pipe.Set(ctx, kept, "1", 0)
	wait := pipe.Do(ctx, "WAIT", 1, 10000)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := wait.Int64(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas acknowledged, %v; want 1", n, err)
	}

	if err := c.FreezeReplication(i); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, lost, "2", 0).Err(); err != nil {
		t.Fatalf("write while frozen: %v", err)
	}
	if _, err := c.KillMaster(i); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFailover(ctx, i); err != nil {
		t.Fatal(err)
	}

	after := c.Client()
	defer after.Close()
	if got, err := after.Get(ctx, kept).Result(); err != nil || got != "1" {
		t.Fatalf("after failover: kept = %q, %v; want 1", got, err)
	}
	if got, err := after.Get(ctx, lost).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after failover: lost = %q, %v; want no such key", got, err)
	}
	slot, _ := after.ClusterKeySlot(ctx, kept).Result()
	if addr, err := c.MasterOf(ctx, int(slot)); err != nil || addr != c.nodes[2*i+1].Addr() {
		t.Fatalf("slot %d served by %s, %v; want the promoted replica %s", slot, addr, err, c.nodes[2*i+1].Addr())
	}

	if addr, err := c.MasterAddr(ctx, i); err != nil || addr != c.nodes[2*i+1].Addr() {
		t.Fatalf("shard %d's master %s, %v; want the promoted replica %s", i, addr, err, c.nodes[2*i+1].Addr())
	}

	if err := c.RestartKilled(ctx, i); err != nil {
		t.Fatal(err)
	}
	if err := c.FreezeReplication(i); err == nil {
		t.Fatal("FreezeReplication after the failover: no error")
	}
}

// redirects counts the MOVED and ASK replies the nodes of a cluster client
// answer.
type redirects struct{ moved, ask atomic.Int64 }

func (r *redirects) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *redirects) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.count(err)
		return err
	}
}

func (r *redirects) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			r.count(cmd.Err())
		}
		return err
	}
}

func (r *redirects) count(err error) {
	switch {
	case err == nil:
	case strings.HasPrefix(err.Error(), "MOVED "):
		r.moved.Add(1)
	case strings.HasPrefix(err.Error(), "ASK "):
		r.ask.Add(1)
	}
}

// Slots move from shard 0 to shard 1 under a writer that keeps updating
// keys in them and creating new ones: no write fails (go-redis follows the
// MOVED and ASK redirections), the nodes redirected it, every key reads back
// its last value, and the slots are served by shard 1's master.
func TestClusterReshardUnderAWriter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := startClusterT(t, ClusterOptions{})
	rdb := c.Client()
	defer rdb.Close()
	var redir redirects
	rdb.OnNewNode(func(node *redis.Client) { node.AddHook(&redir) })

	// Keys of shard 0, and their slots.
	var keys []string
	slotSet := map[int]bool{}
	for n := 0; len(keys) < 20; n++ {
		key := "key:" + strconv.Itoa(n)
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := shardSlots(0); int(slot) >= lo && int(slot) <= hi {
			keys = append(keys, key)
			slotSet[int(slot)] = true
		}
	}
	var slots []int
	for s := range slotSet {
		slots = append(slots, s)
	}

	// The writer: round j sets every key to j and creates {key}:j.
	var (
		mu       sync.Mutex
		werrs    []error
		rounds   int
		migrated atomic.Bool
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		roundsAfter := 0
		for j := 0; roundsAfter < 2 && ctx.Err() == nil; j++ {
			after := migrated.Load()
			for _, k := range keys {
				for _, key := range []string{k, "{" + k + "}:" + strconv.Itoa(j)} {
					if err := rdb.Set(ctx, key, j, 0).Err(); err != nil {
						mu.Lock()
						werrs = append(werrs, fmt.Errorf("SET %s: %w", key, err))
						mu.Unlock()
					}
				}
			}
			mu.Lock()
			rounds = j + 1
			mu.Unlock()
			if after {
				roundsAfter++
			}
		}
	}()
	for { // let it write a round first
		mu.Lock()
		r := rounds
		mu.Unlock()
		if r > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.MigrateSlots(ctx, 0, 1, slots); err != nil {
		t.Fatal(err)
	}
	migrated.Store(true)
	<-done

	mu.Lock()
	defer mu.Unlock()
	if len(werrs) > 0 {
		t.Fatalf("%d writes failed during the reshard, first: %v", len(werrs), werrs[0])
	}
	if redir.moved.Load() == 0 {
		t.Fatal("no MOVED reply: the writer never met a moved slot")
	}
	t.Logf("%d rounds over %d slots; %d MOVED, %d ASK", rounds, len(slots), redir.moved.Load(), redir.ask.Load())
	fresh := c.Client()
	defer fresh.Close()
	for _, k := range keys {
		if got, err := fresh.Get(ctx, k).Result(); err != nil || got != strconv.Itoa(rounds-1) {
			t.Fatalf("%s = %q, %v; want %d", k, got, err, rounds-1)
		}
		for j := 0; j < rounds; j++ {
			key := "{" + k + "}:" + strconv.Itoa(j)
			if got, err := fresh.Get(ctx, key).Result(); err != nil || got != strconv.Itoa(j) {
				t.Fatalf("%s = %q, %v; want %d", key, got, err, j)
			}
		}
	}
	target, err := c.master(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if addr, err := c.MasterOf(ctx, s); err != nil || addr != target.addr() {
			t.Fatalf("slot %d served by %s, %v; want shard 1's master %s", s, addr, err, target.addr())
		}
	}
}
