package natsproc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/internal/natsproc"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

// testenv.Main fails the binary when the tests leave a goroutine running
// (a process's waiter, a connection).
func TestMain(m *testing.M) { testenv.Main(m, nil) }

func startCluster(t *testing.T, n int) *natsproc.Cluster {
	t.Helper()
	c, err := natsproc.StartCluster(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// A three-node cluster: every node is named n<i>, clustered under one name
// with the two others as routes, and runs JetStream with the teamster
// max_payload. An R3 stream survives the SIGKILL of its leader: another node
// is elected, a publish goes through after the election (retried until
// then), and the killed node, restarted on its ports and store, catches up
// and holds every message.
func TestClusterSurvivesTheLossOfTheStreamLeader(t *testing.T) {
	c := startCluster(t, 3)
	if c.Len() != 3 || len(strings.Split(c.URLs(), ",")) != 3 {
		t.Fatalf("URLs %q, want 3", c.URLs())
	}
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.MaxPayload(); got != 8<<20 {
		t.Errorf("max payload %d, want 8 MiB", got)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The servers' names and their cluster, as each reports itself.
	for i, nd := range c.Nodes() {
		one, err := nats.Connect(nd.URL(), nats.NoReconnect())
		if err != nil {
			t.Fatal(err)
		}
		name, cluster := one.ConnectedServerName(), one.ConnectedClusterName()
		one.Close()
		if name != fmt.Sprintf("n%d", i+1) || cluster != natsproc.ClusterName || c.Index(name) != i {
			t.Errorf("node %d is %q in cluster %q", i, name, cluster)
		}
	}

	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(s.CachedInfo().Cluster.Replicas) + 1; got != 3 {
		t.Fatalf("stream has %d peers, want 3", got)
	}
	const before = 10
	for i := 0; i < before; i++ {
		// A stream just created may not have elected its leader yet on a
		// loaded machine: no responders is answered by trying again.
		for {
			_, err := js.Publish(ctx, "t.x", []byte("before"))
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrNoStreamResponse) || ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	leader, err := c.StreamLeader(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	killed := c.Node(leader)
	if err := killed.Kill(); err != nil {
		t.Fatal(err)
	}
	if killed.Running() {
		t.Fatal("the killed node still runs")
	}

	// A publish goes through once the two others have elected a leader.
	start := time.Now()
	tries := 0
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(500*time.Millisecond), backoff.WithMaxElapsedTime(0))
	err = backoff.Retry(func() error {
		tries++
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		_, err := js.Publish(pctx, "t.x", []byte("after"), jetstream.WithMsgID("after-1"))
		return err
	}, backoff.WithContext(bo, ctx))
	if err != nil {
		t.Fatalf("no publish went through after the leader's loss: %v", err)
	}
	t.Logf("publish went through %s after the kill, in %d tries", time.Since(start).Round(time.Millisecond), tries)
	next, err := c.StreamLeader(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("the killed node %s still leads", killed.Name())
	}

	// Back on its ports and its store: it catches up and holds every
	// message, asked directly.
	if err := killed.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitReplicasCurrent(ctx, js, "T", 3); err != nil {
		t.Fatal(err)
	}
	direct, err := nats.Connect(killed.URL(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if direct.ConnectedServerName() != killed.Name() {
		t.Fatalf("connected to %s, want %s", direct.ConnectedServerName(), killed.Name())
	}
	// Moving the leadership to the restarted node shows that its own
	// store holds the stream (a leader answers from its store).
	djs, err := jetstream.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MoveStreamLeader(ctx, "T", killed.Index()); err != nil {
		t.Fatal(err)
	}
	if l, err := c.StreamLeader(ctx, "T"); err != nil || l != killed.Index() {
		t.Fatalf("stream leader %d (%v), want %d", l, err, killed.Index())
	}
	ds, err := djs.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.CachedInfo().State.Msgs; got != before+1 {
		t.Fatalf("the restarted node's stream holds %d messages, want %d", got, before+1)
	}
}

// waitReplicasCurrent waits until stream reports n peers, all current.
func waitReplicasCurrent(ctx context.Context, js jetstream.JetStream, stream string, n int) error {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(500*time.Millisecond), backoff.WithMaxElapsedTime(0))
	return backoff.Retry(func() error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		s, err := js.Stream(rctx, stream)
		if err != nil {
			return err
		}
		cl := s.CachedInfo().Cluster
		if cl == nil || cl.Leader == "" || len(cl.Replicas) != n-1 {
			return errors.New("not all peers reported")
		}
		for _, p := range cl.Replicas {
			if !p.Current || p.Offline {
				return fmt.Errorf("peer %s not current", p.Name)
			}
		}
		return nil
	}, backoff.WithContext(bo, ctx))
}

// A consumer's leader is moved to each node in turn.
func TestMoveConsumerLeader(t *testing.T) {
	c := startCluster(t, 3)
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < c.Len(); i++ {
		if err := c.MoveConsumerLeader(ctx, "T", "d", i); err != nil {
			t.Fatal(err)
		}
		if l, err := c.ConsumerLeader(ctx, "T", "d"); err != nil || l != i {
			t.Fatalf("consumer leader %d (%v), want %d", l, err, i)
		}
	}
}

// A node is paused and resumed, stopped and started again; Start refuses a
// node that runs, and WaitReady a cluster with a node down.
func TestNodeLifecycle(t *testing.T) {
	c := startCluster(t, 3)
	nd := c.Node(1)
	if err := nd.Start(); err == nil {
		t.Fatal("Start of a running node succeeded")
	}
	if err := nd.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := nd.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := nd.Stop(); err != nil {
		t.Fatal(err)
	}
	if nd.Running() {
		t.Fatal("a stopped node runs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err == nil {
		t.Fatal("WaitReady succeeded with a node down")
	}
	if err := nd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// One node runs JetStream on its own (no cluster block).
func TestSingleNode(t *testing.T) {
	c := startCluster(t, 1)
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatal(err)
	}
	if nc.ConnectedClusterName() != "" {
		t.Fatalf("a single node is in cluster %q", nc.ConnectedClusterName())
	}
}
