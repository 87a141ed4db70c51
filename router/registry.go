package router

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

// registryView follows KV TEAMSTER_WORKERS. An entry counts while the worker
// is active or draining and its last update arrived less than the bucket TTL
// ago, by this router's own clock (expired KV entries vanish without a
// delete notice, and the router must not trust other clocks).
type registryView struct {
	mu      sync.Mutex
	workers map[string]seenEntry
	w       jetstream.KeyWatcher
	log     logrus.FieldLogger
	done    chan struct{}
}

type seenEntry struct {
	entry bus.WorkerEntry
	seen  time.Time
}

func watchRegistry(ctx context.Context, kv jetstream.KeyValue, log logrus.FieldLogger) (*registryView, error) {
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return nil, err
	}
	v := &registryView{workers: map[string]seenEntry{}, w: w, log: log, done: make(chan struct{})}
	initial := make(chan struct{})
	go v.loop(initial)
	select {
	case <-initial:
	case <-ctx.Done():
		w.Stop()
		return nil, ctx.Err()
	}
	return v, nil
}

func (v *registryView) loop(initial chan struct{}) {
	defer close(v.done)
	first := true
	for u := range v.w.Updates() {
		if u == nil {
			if first {
				close(initial)
				first = false
			}
			continue
		}
		v.mu.Lock()
		switch u.Operation() {
		case jetstream.KeyValuePut:
			var e bus.WorkerEntry
			if err := json.Unmarshal(u.Value(), &e); err != nil || e.Validate() != nil {
				v.log.WithField("worker", u.Key()).Warn("ignoring an invalid registry entry")
				delete(v.workers, u.Key())
			} else {
				v.workers[u.Key()] = seenEntry{entry: e, seen: time.Now()}
			}
		default:
			delete(v.workers, u.Key())
		}
		v.mu.Unlock()
	}
	if first {
		close(initial)
	}
}

func (v *registryView) stop() {
	_ = v.w.Stop()
	<-v.done
}

// live returns the entries heard from within the bucket TTL.
func (v *registryView) live() []bus.WorkerEntry {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]bus.WorkerEntry, 0, len(v.workers))
	for id, s := range v.workers {
		if time.Since(s.seen) > bus.WorkersTTL {
			delete(v.workers, id)
			continue
		}
		out = append(out, s.entry)
	}
	return out
}

// manifests returns every manifest live workers advertise (selection folds
// duplicates of one id).
func (v *registryView) manifests() []selection.Manifest { return bus.LiveManifests(v.live()) }
