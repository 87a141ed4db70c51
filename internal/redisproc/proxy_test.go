package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startT starts a redis-server for a test and kills it when the test ends.
func startT(t *testing.T, dir string, o Options) *Redis {
	t.Helper()
	r, err := StartWith(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	return r
}

// clientT is a client the test closes when it ends.
func clientT(t *testing.T, opts *redis.Options) *redis.Client {
	t.Helper()
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// replicaBehindProxy starts a primary, a proxy in front of it and a replica
// of the proxy, and waits until the replica is in sync through the proxy.
func replicaBehindProxy(t *testing.T, ctx context.Context) (primary, replica *Redis, proxy *Proxy) {
	t.Helper()
	dir := t.TempDir()
	primary = startT(t, dir, Options{Args: []string{"--dbfilename", "primary.rdb", "--repl-diskless-sync-delay", "0"}})
	proxy, err := NewProxy(primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	replica = startT(t, dir, Options{Args: []string{"--dbfilename", "replica.rdb",
		"--replicaof", "127.0.0.1", strconv.Itoa(proxy.Port())}})
	rc := clientT(t, replica.options())
	err = pollUntil(ctx, "replica in sync through the proxy", func(ctx context.Context) error {
		if st, err := infoField(ctx, rc, "replication", "master_link_status"); err != nil || st != "up" {
			return fmt.Errorf("master_link_status %q, %v", st, err)
		}
		if n := proxy.ReplicationLinks(); n != 1 {
			return fmt.Errorf("%d replication links through the proxy", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return primary, replica, proxy
}

// masterOffset is the primary's master_repl_offset.
func masterOffset(t *testing.T, ctx context.Context, c *redis.Client) int64 {
	t.Helper()
	v, err := infoField(ctx, c, "replication", "master_repl_offset")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitKey waits until c has key with value want.
func waitKey(t *testing.T, ctx context.Context, c *redis.Client, key, want string) {
	t.Helper()
	err := pollUntil(ctx, "key "+key+" on "+c.Options().Addr, func(ctx context.Context) error {
		got, err := c.Get(ctx, key).Result()
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s = %q, want %q", key, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A write made while replication is frozen is acknowledged, readable through
// the proxy, sent by the primary, and never reaches the replica; a write from
// before the freeze did.
func TestProxyFreezeKeepsAWriteFromTheReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	primary, replica, proxy := replicaBehindProxy(t, ctx)
	viaProxy := clientT(t, &redis.Options{Addr: proxy.Addr()}) // an ordinary client through the proxy
	rc := clientT(t, replica.options())

	if err := viaProxy.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitKey(t, ctx, rc, "before", "1")

	proxy.FreezeReplication()
	pc := clientT(t, primary.options())
	from := masterOffset(t, ctx, pc)
	if err := viaProxy.Set(ctx, "during", "2", 0).Err(); err != nil {
		t.Fatalf("write through the proxy while frozen: %v", err)
	}
	if got, err := viaProxy.Get(ctx, "during").Result(); err != nil || got != "2" {
		t.Fatalf("read through the proxy while frozen: %q, %v", got, err)
	}
	// Every byte of the replication stream from the freeze on, the write
	// among them, was sent by the primary and thrown away by the proxy.
	to := masterOffset(t, ctx, pc)
	err := pollUntil(ctx, "the write's replication stream discarded", func(context.Context) error {
		if d := proxy.Discarded(); d < to-from {
			return fmt.Errorf("%d bytes discarded, stream grew by %d", d, to-from)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Once the primary is gone nothing more can reach the replica.
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	err = pollUntil(ctx, "replica's link down", func(ctx context.Context) error {
		if st, err := infoField(ctx, rc, "replication", "master_link_status"); err != nil || st != "down" {
			return fmt.Errorf("master_link_status %q, %v", st, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rc.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("replica: before = %q, %v; want 1", got, err)
	}
	if got, err := rc.Get(ctx, "during").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("replica: during = %q, %v; want no such key", got, err)
	}
}

// Thawing closes the link that lost the frozen write; the replica
// reconnects, resynchronises and gets it.
func TestProxyThawResynchronisesTheReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	primary, replica, proxy := replicaBehindProxy(t, ctx)
	pc := clientT(t, primary.options())
	rc := clientT(t, replica.options())

	proxy.FreezeReplication()
	from := masterOffset(t, ctx, pc)
	if err := pc.Set(ctx, "during", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	to := masterOffset(t, ctx, pc)
	err := pollUntil(ctx, "the write's replication stream discarded", func(context.Context) error {
		if d := proxy.Discarded(); d < to-from {
			return fmt.Errorf("%d bytes discarded, stream grew by %d", d, to-from)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	proxy.ThawReplication()
	waitKey(t, ctx, rc, "during", "2")
}

// readCommand splits a pipelined stream into its commands, byte for byte,
// and names them; an inline command is not RESP.
func TestReadCommandSplitsAPipeline(t *testing.T) {
	stream := "*1\r\n$4\r\nPING\r\n*3\r\n$5\r\npsync\r\n$1\r\n?\r\n$2\r\n-1\r\n"
	r := bufio.NewReader(strings.NewReader(stream))
	var again string
	for _, want := range []string{"PING", "psync"} {
		raw, name, err := readCommand(r)
		if err != nil {
			t.Fatal(err)
		}
		if name != want {
			t.Fatalf("name %q, want %q", name, want)
		}
		again += string(raw)
	}
	if again != stream {
		t.Fatalf("commands %q, want the stream %q", again, stream)
	}
	if _, _, err := readCommand(bufio.NewReader(strings.NewReader("PING\r\n"))); !errors.Is(err, errNotRESP) {
		t.Fatalf("inline command: %v, want errNotRESP", err)
	}
}
