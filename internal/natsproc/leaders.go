package natsproc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream stream and consumer leaders: which node leads, and moving the lead.

// StreamLeader is the index of the node leading stream, as JetStream's
// stream info reports it (Cluster.Leader, a server name). While the stream
// has no leader (an election), or the one reported is not running, it asks
// again until ctx ends.
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (int, error) {
	return c.leader(ctx, "stream "+stream, func(ctx context.Context, js jetstream.JetStream) (*jetstream.ClusterInfo, error) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		return s.CachedInfo().Cluster, nil
	})
}

// ConsumerLeader is StreamLeader for a consumer of stream (a durable
// consumer has a leader of its own, which need not be the stream's).
func (c *Cluster) ConsumerLeader(ctx context.Context, stream, consumer string) (int, error) {
	return c.leader(ctx, "consumer "+stream+" > "+consumer, func(ctx context.Context, js jetstream.JetStream) (*jetstream.ClusterInfo, error) {
		cons, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return nil, err
		}
		return cons.CachedInfo().Cluster, nil
	})
}

// leader asks info for the cluster info of what until it names a running
// node.
func (c *Cluster) leader(ctx context.Context, what string, info func(context.Context, jetstream.JetStream) (*jetstream.ClusterInfo, error)) (int, error) {
	nc, err := c.connect()
	if err != nil {
		return -1, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return -1, err
	}
	leader := -1
	err = poll(ctx, func() error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		cl, err := info(rctx, js)
		if err != nil {
			return err
		}
		if cl == nil || cl.Leader == "" {
			return errors.New("no leader")
		}
		i := c.Index(cl.Leader)
		if i < 0 {
			return backoff.Permanent(fmt.Errorf("led by %q, no node of this cluster", cl.Leader))
		}
		if !c.nodes[i].Running() {
			return fmt.Errorf("reported leader %s is not running", cl.Leader)
		}
		leader = i
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("natsproc: leader of %s: %w", what, err)
	}
	return leader, nil
}

// MoveStreamLeader makes node to the leader of stream: it asks the leader
// to step down in favour of it (JetStream's preferred placement) until
// stream info names it. A chaos scenario uses it to put several streams'
// leaders on the node it is about to kill.
func (c *Cluster) MoveStreamLeader(ctx context.Context, stream string, to int) error {
	return c.moveLeader(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, to,
		func(ctx context.Context) (int, error) { return c.StreamLeader(ctx, stream) })
}

// MoveConsumerLeader is MoveStreamLeader for a consumer of stream.
func (c *Cluster) MoveConsumerLeader(ctx context.Context, stream, consumer string, to int) error {
	return c.moveLeader(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+consumer, to,
		func(ctx context.Context) (int, error) { return c.ConsumerLeader(ctx, stream, consumer) })
}

func (c *Cluster) moveLeader(ctx context.Context, stepdown string, to int, leader func(context.Context) (int, error)) error {
	if to < 0 || to >= len(c.nodes) {
		return fmt.Errorf("natsproc: no node %d", to)
	}
	req := []byte(fmt.Sprintf(`{"placement":{"preferred":%q}}`, c.nodes[to].name))
	return poll(ctx, func() error {
		l, err := leader(ctx)
		if err != nil {
			return backoff.Permanent(err)
		}
		if l == to {
			return nil
		}
		nc, err := c.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := nc.RequestWithContext(rctx, stepdown, req); err != nil {
			return fmt.Errorf("step down: %w", err)
		}
		return fmt.Errorf("%s leads, not %s", c.nodes[l].name, c.nodes[to].name)
	})
}

// connect opens a connection to any running node, for the cluster's own
// questions; it does not reconnect.
func (c *Cluster) connect() (*nats.Conn, error) {
	var urls []string
	for _, nd := range c.nodes {
		if nd.Running() {
			urls = append(urls, nd.URL())
		}
	}
	if len(urls) == 0 {
		return nil, errors.New("natsproc: no node is running")
	}
	return nats.Connect(strings.Join(urls, ","), nats.Name("natsproc"), nats.NoReconnect(), nats.Timeout(time.Second),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // not to stderr
}
