package redisproc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startSentinelSetT starts a SentinelSet that the test closes when it ends.
func startSentinelSetT(t *testing.T, opts SentinelOptions) *SentinelSet {
	t.Helper()
	s, err := StartSentinelSet(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A write acknowledged while replication is frozen is lost when the primary
// dies: through a sentinel-mode client after the failover, the write from
// before the freeze is there and the frozen one is not. The killed primary
// restarts on its port.
func TestSentinelFailoverLosesTheFrozenWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	s := startSentinelSetT(t, SentinelOptions{MinReplicasToWrite: 1, MinReplicasMaxLag: 10})
	first, err := s.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first != s.Proxy().Addr() {
		t.Fatalf("master %s, want the proxy %s", first, s.Proxy().Addr())
	}
	rdb := s.Client()
	defer rdb.Close()

	// The first write reaches the replica: WAIT on the connection that
	// wrote it.
	pipe := rdb.Pipeline()
	pipe.Set(ctx, "kept", "1", 0)
	wait := pipe.Do(ctx, "WAIT", 1, 10000)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := wait.Int64(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas acknowledged, %v; want 1", n, err)
	}

	if err := s.FreezeReplication(); err != nil {
		t.Fatal(err)
	}
	// Acknowledged by the primary, though min-replicas-to-write is 1: the
	// frozen replica still sends its acknowledgements.
	if err := rdb.Set(ctx, "lost", "2", 0).Err(); err != nil {
		t.Fatalf("write while frozen: %v", err)
	}

	old, err := s.KillPrimary()
	if err != nil {
		t.Fatal(err)
	}
	if old != first {
		t.Fatalf("killed %s, want %s", old, first)
	}
	now, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if now == s.Proxy().Addr() {
		t.Fatalf("new master %s is the proxy", now)
	}

	after := s.Client()
	defer after.Close()
	if got, err := after.Get(ctx, "kept").Result(); err != nil || got != "1" {
		t.Fatalf("after failover: kept = %q, %v; want 1", got, err)
	}
	if got, err := after.Get(ctx, "lost").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after failover: lost = %q, %v; want no such key", got, err)
	}
	if err := s.FreezeReplication(); err == nil {
		t.Fatal("FreezeReplication after the failover: no error")
	}

	if err := s.RestartKilled(); err != nil {
		t.Fatal(err)
	}
	c := s.data[0].Client()
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("restarted primary: %v", err)
	}
}
