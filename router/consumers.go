package router

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
)

// consumerMaker creates the durable pull consumer harness_<harnessId> on
// TEAMSTER_ATTEMPTS for every harness id a worker advertises in the
// registry, in any state (a starting worker waits for its consumers before it
// fetches). Routers are the fleet's control plane: workers look their
// consumers up and never create one, so that no worker credential can make
// JetStream deliver stored attempts anywhere (docs/ARCHITECTURE.md,
// "Security"). Every router does it; creating a consumer that exists with the
// same configuration changes nothing, so they need no leader.
type consumerMaker struct {
	js  jetstream.JetStream
	log logrus.FieldLogger

	mu   sync.Mutex
	want map[string]bool // harness ids seen in the registry, true once made
	kick chan struct{}

	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newConsumerMaker(js jetstream.JetStream, log logrus.FieldLogger) *consumerMaker {
	return &consumerMaker{js: js, log: log, want: map[string]bool{}, kick: make(chan struct{}, 1), stopCh: make(chan struct{})}
}

// saw records the harness ids of a registry entry; new ones get their
// consumer at once, in the loop.
func (c *consumerMaker) saw(e *bus.WorkerEntry) {
	c.mu.Lock()
	added := false
	for _, m := range e.Harnesses {
		if _, ok := c.want[m.ID]; !ok {
			c.want[m.ID] = false
			added = true
		}
	}
	c.mu.Unlock()
	if added {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

func (c *consumerMaker) start() {
	c.wg.Add(1)
	go c.loop()
}

func (c *consumerMaker) stop() {
	c.stopOnce.Do(func() { close(c.stopCh) })
	c.wg.Wait()
}

// loop makes the missing consumers when an id is new, and tries again every
// heartbeat interval for those that failed (JetStream unavailable). Once
// made, a consumer is not looked at again: it is durable, and only an
// operator deletes one (the next router start makes it again).
func (c *consumerMaker) loop() {
	defer c.wg.Done()
	t := time.NewTicker(bus.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.kick:
		case <-t.C:
		}
		c.makeMissing()
	}
}

func (c *consumerMaker) makeMissing() {
	c.mu.Lock()
	var ids []string
	for id, made := range c.want {
		if !made {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), bus.HeartbeatInterval)
		_, err := bus.EnsureHarnessConsumer(ctx, c.js, id)
		cancel()
		if err != nil {
			c.log.WithField("harness", id).Warn("consumer not created yet; trying again: " + err.Error())
			continue
		}
		c.mu.Lock()
		c.want[id] = true
		c.mu.Unlock()
		c.log.WithField("harness", id).Debug("consumer " + bus.ConsumerName(id) + " ready")
	}
}
