package main

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClusterRoundTrips checks how the fleet's cluster clients count round
// trips: the counter on the node clients sees a pipeline split over the
// three masters as three round trips, the one on the cluster client as
// one; a single command is one on both.
func TestClusterRoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	srv, err := startTopology(t.TempDir(), topoCluster)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	if got := srv.roleCount("master"); got != 3 {
		t.Fatalf("%d masters among %v", got, srv.nodes)
	}
	if got := srv.roleCount("replica"); got != 3 {
		t.Fatalf("%d replicas among %v", got, srv.nodes)
	}
	rt, issued := &rtCounter{}, &rtCounter{}
	rdb, err := srv.newFleetRedis(rt, issued)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("cluster mode gave a %T", rdb)
	}
	ctx := context.Background()
	// Warm: the first command loads the slot map (CLUSTER SLOTS) and dials.
	if err := rdb.Set(ctx, "{a}warm", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}

	rt.reset()
	issued.reset()
	if err := rdb.Set(ctx, "{a}x", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if rt.trips.Load() != 1 || issued.trips.Load() != 1 {
		t.Errorf("one SET: %d node round trips, %d issued; want 1 and 1", rt.trips.Load(), issued.trips.Load())
	}

	// {a}, {b} and {c} hash to slots 15495, 3300 and 7365: shards 2, 0, 1.
	rt.reset()
	issued.reset()
	pipe := rdb.Pipeline()
	for _, k := range []string{"{a}1", "{b}1", "{c}1", "{a}2", "{b}2", "{c}2"} {
		pipe.Incr(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if rt.trips.Load() != 3 || rt.cmds.Load() != 6 {
		t.Errorf("a pipeline over 3 masters: %d node round trips carrying %d commands; want 3 carrying 6", rt.trips.Load(), rt.cmds.Load())
	}
	if issued.trips.Load() != 1 || issued.cmds.Load() != 6 {
		t.Errorf("a pipeline over 3 masters: %d issued carrying %d commands; want 1 carrying 6", issued.trips.Load(), issued.cmds.Load())
	}
}
