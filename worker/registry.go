package worker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

type registryParams struct {
	kv  jetstream.KeyValue
	w   *Worker
	log logrus.FieldLogger
}

// registry heartbeats the worker's entry in KV TEAMSTER_WORKERS every
// bus.HeartbeatInterval; the bucket's TTL removes it when heartbeats stop.
type registry struct {
	kv   jetstream.KeyValue
	w    *Worker
	log  logrus.FieldLogger
	kick chan struct{}

	stopOnce sync.Once
	stopCh   chan struct{}
	wg       sync.WaitGroup
}

func newRegistry(p registryParams) *registry {
	return &registry{kv: p.kv, w: p.w, log: p.log, kick: make(chan struct{}, 1), stopCh: make(chan struct{})}
}

func (r *registry) start() {
	r.wg.Add(1)
	go r.loop()
}

func (r *registry) loop() {
	defer r.wg.Done()
	t := time.NewTicker(bus.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stopCh:
			return
		case <-t.C:
		case <-r.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), bus.HeartbeatInterval)
		if err := r.put(ctx); err != nil {
			r.log.Warn("registry heartbeat failed: " + err.Error())
		}
		r.w.observe(ctx)
		cancel()
	}
}

// kickNow asks for a heartbeat now (after a state change).
func (r *registry) kickNow() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *registry) stop() {
	r.stopOnce.Do(func() { close(r.stopCh) })
	r.wg.Wait()
}

func (r *registry) entry() bus.WorkerEntry {
	w := r.w
	ms := make([]selection.Manifest, 0, len(w.harnesses))
	for _, h := range w.harnesses {
		ms = append(ms, h.impl.Manifest())
	}
	return bus.WorkerEntry{
		V: bus.Version, WorkerID: w.id, State: w.state().String(), Harnesses: ms, Slots: w.cfg.Slots,
		InFlight: w.InFlight(), HeartbeatMs: time.Now().UnixMilli(), StartedMs: w.started.UnixMilli(), Version: w.version,
	}
}

func (r *registry) put(ctx context.Context) error {
	b, err := json.Marshal(r.entry())
	if err != nil {
		return err
	}
	_, err = r.kv.Put(ctx, r.w.id, b)
	return err
}

// remove deletes the worker's entry: it leaves the registry at once rather
// than when the TTL runs out.
func (r *registry) remove(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.kv.Delete(ctx, r.w.id); err != nil {
		r.log.Warn("could not remove the registry entry (it expires on its own): " + err.Error())
	}
}

// observe refreshes the gauges that are read rather than counted: slots in
// use (the runs in flight, as the registry entry reports them) and leases
// held. Queue figures describe the fleet, not a worker: one router exports
// them (teamster_queue_attempts).
func (w *Worker) observe(context.Context) {
	w.m.SlotsUsed.Set(float64(w.InFlight()))
	w.m.LeasesHeld.Set(float64(w.keep.Len()))
}
