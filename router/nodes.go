package router

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/leases"
)

// nodeWatchInterval is how often a router asks the Redis primaries for their
// replication ids. It bounds how long after a failover a slot that no claim
// touches yet is marked; a claim marks its own slot at once.
const nodeWatchInterval = time.Second

type nodeWatcherParams struct {
	store    *leases.Store
	interval time.Duration
	log      logrus.FieldLogger
	m        *metrics.Router
}

// nodeWatcher marks every hash slot with the Redis node that serves it
// whenever a primary's replication id changes (a promoted replica, a
// restarted node) and when the router starts: the slot's quarantine of new
// fence epochs (docs/ARCHITECTURE.md, "Fencing across failovers") then
// starts when the node began to serve it, and a session whose first claim
// comes long after waits for nothing. It is an optimisation of when the
// quarantine starts, never a condition of safety: the claim script marks its
// own slot when it finds the marker stale.
type nodeWatcher struct {
	nodeWatcherParams
	last     map[string]string // the replication ids marked, by primary address
	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newNodeWatcher(p nodeWatcherParams) *nodeWatcher {
	return &nodeWatcher{nodeWatcherParams: p, stopCh: make(chan struct{})}
}

func (w *nodeWatcher) start() {
	w.wg.Add(1)
	go w.loop()
}

func (w *nodeWatcher) stop() {
	w.stopOnce.Do(func() { close(w.stopCh) })
	w.wg.Wait()
}

func (w *nodeWatcher) loop() {
	defer w.wg.Done()
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.check()
		select {
		case <-w.stopCh:
			return
		case <-t.C:
		}
	}
}

// check marks the slots when the primaries' replication ids are not the
// ones marked last.
func (w *nodeWatcher) check() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*w.interval)
	defer cancel()
	ids, err := w.store.NodeIDs(ctx)
	if err != nil {
		w.log.Debug("redis node watch: " + err.Error())
		return
	}
	if maps.Equal(ids, w.last) {
		return
	}
	n, err := w.store.MarkNodes(ctx)
	if err != nil {
		w.log.Warn("redis node watch: " + err.Error())
		return
	}
	if n > 0 {
		w.m.NodeMarks.Add(float64(n))
		w.log.WithField("slots", n).Info("redis: the node serving these hash slots changed (a failover, restart or data loss); their sessions' new fence epochs wait the quarantine")
	}
	w.last = ids
}
