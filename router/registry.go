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

// staleAfter is how long the watch may go without any update before the
// router suspects it (every live worker heartbeats every 2 s): it then
// watches anew and, meanwhile, keeps the entries it has instead of expiring
// them.
const staleAfter = 2*bus.HeartbeatInterval + time.Second

// registryView follows KV TEAMSTER_WORKERS. An entry counts while the worker
// is active or draining and its last update arrived less than the bucket TTL
// ago, by this router's own clock (expired KV entries vanish without a
// delete notice, and the router must not trust other clocks). A watch that
// has heard nothing for a while (a NATS server restart leaves it silent until
// it notices) is replaced by a new one whose initial values replace the
// view, and the view expires nothing while the watch is suspect, so a NATS
// restart never empties it.
type registryView struct {
	kv  jetstream.KeyValue
	log logrus.FieldLogger

	mu      sync.Mutex
	workers map[string]seenEntry
	lastMsg time.Time
	w       jetstream.KeyWatcher
	gen     int // which watch is current
	// set is the live harnesses prepared for selection, built on first use
	// after the view changed and kept until an entry in it may expire
	// (setUntil): submits read it, so they neither copy the entries nor
	// validate and sort the manifests each time.
	set      *selection.Harnesses
	setUntil time.Time

	stopCh chan struct{}
	wg     sync.WaitGroup
}

type seenEntry struct {
	entry bus.WorkerEntry
	seen  time.Time
}

func watchRegistry(ctx context.Context, kv jetstream.KeyValue, log logrus.FieldLogger) (*registryView, error) {
	v := &registryView{kv: kv, log: log, workers: map[string]seenEntry{}, stopCh: make(chan struct{})}
	if err := v.rewatch(ctx); err != nil {
		return nil, err
	}
	v.wg.Add(1)
	go v.guard()
	return v, nil
}

// rewatch starts a new watch, waits for its initial values and makes them
// the view.
func (v *registryView) rewatch(ctx context.Context) error {
	w, err := v.kv.WatchAll(context.Background())
	if err != nil {
		return err
	}
	fresh := map[string]seenEntry{}
	for {
		select {
		case u, ok := <-w.Updates():
			if !ok {
				return errWatchClosed
			}
			if u == nil { // initial values done
				v.mu.Lock()
				old := v.w
				v.gen++
				gen := v.gen
				v.w, v.workers, v.lastMsg = w, fresh, time.Now()
				v.set = nil
				v.mu.Unlock()
				if old != nil {
					_ = old.Stop()
				}
				v.wg.Add(1)
				go v.follow(w, gen)
				return nil
			}
			apply(fresh, u, v.log)
		case <-ctx.Done():
			_ = w.Stop()
			return ctx.Err()
		}
	}
}

// follow applies a watch's updates while it is the current one.
func (v *registryView) follow(w jetstream.KeyWatcher, gen int) {
	defer v.wg.Done()
	for u := range w.Updates() {
		if u == nil {
			continue
		}
		v.mu.Lock()
		if v.gen != gen {
			v.mu.Unlock()
			return
		}
		apply(v.workers, u, v.log)
		v.lastMsg = time.Now()
		v.set = nil
		v.mu.Unlock()
	}
}

func apply(m map[string]seenEntry, u jetstream.KeyValueEntry, log logrus.FieldLogger) {
	switch u.Operation() {
	case jetstream.KeyValuePut:
		var e bus.WorkerEntry
		if err := json.Unmarshal(u.Value(), &e); err != nil || e.Validate() != nil {
			log.WithField("worker", u.Key()).Warn("ignoring an invalid registry entry")
			delete(m, u.Key())
			return
		}
		m[u.Key()] = seenEntry{entry: e, seen: time.Now()}
	default:
		delete(m, u.Key())
	}
}

// guard replaces a watch that has gone silent.
func (v *registryView) guard() {
	defer v.wg.Done()
	t := time.NewTicker(bus.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-v.stopCh:
			return
		case <-t.C:
		}
		v.mu.Lock()
		silent := time.Since(v.lastMsg) > staleAfter
		v.mu.Unlock()
		if !silent {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := v.rewatch(ctx); err != nil {
			v.log.Debug("registry: watching anew failed (retrying): " + err.Error())
		}
		cancel()
	}
}

func (v *registryView) stop() {
	close(v.stopCh)
	v.mu.Lock()
	w := v.w
	v.gen++
	v.mu.Unlock()
	if w != nil {
		_ = w.Stop()
	}
	v.wg.Wait()
}

// live returns the entries heard from within the bucket TTL; while the watch
// is suspect (silent) it expires nothing.
func (v *registryView) live() []bus.WorkerEntry {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.liveLocked(time.Now())
}

func (v *registryView) liveLocked(now time.Time) []bus.WorkerEntry {
	trust := now.Sub(v.lastMsg) <= staleAfter
	out := make([]bus.WorkerEntry, 0, len(v.workers))
	for id, s := range v.workers {
		if trust && now.Sub(s.seen) > bus.WorkersTTL {
			delete(v.workers, id)
			v.set = nil
			continue
		}
		out = append(out, s.entry)
	}
	return out
}

// manifests returns every manifest live workers advertise (selection folds
// duplicates of one id).
func (v *registryView) manifests() []selection.Manifest { return bus.LiveManifests(v.live()) }

// harnesses returns the live harnesses prepared for selection. While the
// watch is suspect nothing expires, so the prepared set stays as it is until
// an update arrives (which rebuilds it).
func (v *registryView) harnesses() *selection.Harnesses {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	trust := now.Sub(v.lastMsg) <= staleAfter
	if v.set != nil && (!trust || !now.After(v.setUntil)) {
		return v.set
	}
	live := v.liveLocked(now)
	set := selection.NewHarnesses(bus.LiveManifests(live))
	until := now.Add(bus.WorkersTTL)
	for _, s := range v.workers {
		if exp := s.seen.Add(bus.WorkersTTL); exp.Before(until) {
			until = exp
		}
	}
	v.set, v.setUntil = set, until
	return set
}
