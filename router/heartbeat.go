package router

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/metrics"
)

type heartbeatParams struct {
	id      string
	entry   bus.RouterEntry // refreshed with each beat's time
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	log     logrus.FieldLogger
	m       *metrics.Router
	harness func() []string // the harness ids live workers host
}

// heartbeat keeps the router's entry in KV TEAMSTER_ROUTERS fresh (every
// bus.HeartbeatInterval; it expires bus.WorkersTTL after the last) and
// reports the queue figures. Those describe the fleet, not one router, so
// only one router exports them: the live router with the lowest id (ids
// made by New sort by start time, so the oldest), and a sum over every
// router's metrics is the fleet's figure. Another router takes over within
// one TTL of the reporter's death, as its entry expires.
type heartbeat struct {
	heartbeatParams
	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	// exported are the harnesses whose queue figures this router exported
	// at its last beat; only the loop touches it.
	exported map[string]bool
}

func newHeartbeat(p heartbeatParams) *heartbeat {
	return &heartbeat{heartbeatParams: p, stopCh: make(chan struct{})}
}

func (h *heartbeat) start() {
	h.beat()
	h.wg.Add(1)
	go h.loop()
}

// stop ends the loop, then removes the entry: the router leaves the
// registry at once rather than when the TTL runs out.
func (h *heartbeat) stop() {
	h.stopOnce.Do(func() { close(h.stopCh) })
	h.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.kv.Delete(ctx, h.id); err != nil {
		h.log.Warn("could not remove the router's registry entry (it expires on its own): " + err.Error())
	}
}

func (h *heartbeat) loop() {
	defer h.wg.Done()
	t := time.NewTicker(bus.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stopCh:
			return
		case <-t.C:
			h.beat()
		}
	}
}

// beat puts the entry, then refreshes the queue figures when this router is
// the reporter. Failures are logged at debug: a NATS outage shows in every
// other log line and metric already.
func (h *heartbeat) beat() {
	ctx, cancel := context.WithTimeout(context.Background(), bus.HeartbeatInterval)
	defer cancel()
	h.entry.HeartbeatMs = time.Now().UnixMilli()
	b, err := json.Marshal(h.entry)
	if err != nil {
		return
	}
	if _, err := h.kv.Put(ctx, h.id, b); err != nil {
		h.log.Debug("router registry entry not refreshed: " + err.Error())
		return
	}
	h.report(ctx)
}

// report exports the queue figures when this router is the live router with
// the lowest id, and clears them when it is not.
func (h *heartbeat) report(ctx context.Context) {
	reporter, err := h.lowestLive(ctx)
	if err != nil {
		h.log.Debug("router registry not read: " + err.Error())
		return
	}
	if reporter != h.id {
		if h.exported != nil {
			h.m.Queue.Reset()
			h.exported = nil
		}
		return
	}
	st, err := h.js.Stream(ctx, bus.StreamAttempts)
	if err != nil {
		h.log.Debug("attempts stream not read: " + err.Error())
		return
	}
	// Every harness that live workers host has a series, 0 when idle, so
	// that dashboards and alert rules see it.
	seen := map[string]bool{}
	for _, id := range h.harness() {
		seen[id] = true
	}
	for name := range st.ConsumerNames(ctx).Name() {
		if id, ok := strings.CutPrefix(name, "harness_"); ok {
			seen[id] = true
		}
	}
	for id := range h.exported {
		if !seen[id] {
			h.m.Queue.DeleteLabelValues(id, metrics.QueueUndelivered)
			h.m.Queue.DeleteLabelValues(id, metrics.QueueHeld)
		}
	}
	for id := range seen {
		// A harness no worker has made its consumer for yet waits for
		// nothing (its attempts are refused harness_not_registered); a
		// consumer that does not answer keeps its last figures.
		undelivered, held := 0.0, 0.0
		c, err := st.Consumer(ctx, "harness_"+id)
		if err == nil {
			info, err := c.Info(ctx)
			if err != nil {
				h.log.Debug("consumer harness_" + id + " not read: " + err.Error())
				continue
			}
			undelivered, held = float64(info.NumPending), float64(info.NumAckPending)
		} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			h.log.Debug("consumer harness_" + id + " not read: " + err.Error())
			continue
		}
		h.m.Queue.WithLabelValues(id, metrics.QueueUndelivered).Set(undelivered)
		h.m.Queue.WithLabelValues(id, metrics.QueueHeld).Set(held)
	}
	h.exported = seen
}

// lowestLive is the lowest router id in the registry.
func (h *heartbeat) lowestLive(ctx context.Context) (string, error) {
	lister, err := h.kv.ListKeys(ctx)
	if err != nil {
		return "", err
	}
	lowest := ""
	for k := range lister.Keys() {
		if lowest == "" || k < lowest {
			lowest = k
		}
	}
	return lowest, nil
}
