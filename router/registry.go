package router

import (
	"context"
	"encoding/json"
	"errors"
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
//
// Every watch lives under a context of its own, derived from the view's, and
// is ended by cancelling it: nats.go ties a watch's subscription to the
// context it was made with, and when that context ends a goroutine of
// nats.go unsubscribes it, then deletes its consumer. The view waits for the
// first (its reader ends when the watch closes), never for the second,
// which takes nats.go's whole request timeout (5 s) while the server is
// unreachable. A watch's context ends when the watch is replaced or the
// view stops; the view's ends at stop, which so also cancels a re-watch in
// progress. Before, a re-watch ran under a context that stop did not end:
// stop waited for it (a consumer request to a server that is down), and a
// re-watch that got its initial values after stop had taken the current
// watch installed one that nobody stopped, whose reader stop then waited for
// forever.
type registryView struct {
	kv  jetstream.KeyValue
	log logrus.FieldLogger
	// saw is told every valid entry the watch delivers (the consumers'
	// maker); nil: nobody.
	saw func(*bus.WorkerEntry)

	// ctx ends when the view stops (cancel): the watches' contexts, and
	// the guard's re-watches, derive from it.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	workers map[string]seenEntry
	lastMsg time.Time
	wcancel context.CancelFunc // ends the current watch
	gen     int                // which watch is current
	// set is the live harnesses prepared for selection, built on first use
	// after the view changed and kept until an entry in it may expire
	// (setUntil): submits read it, so they neither copy the entries nor
	// validate and sort the manifests each time.
	set      *selection.Harnesses
	setUntil time.Time

	// wg counts the guard and every goroutine reading a watch's updates.
	wg sync.WaitGroup
}

type seenEntry struct {
	entry bus.WorkerEntry
	seen  time.Time
}

// errStopped says the view stopped while it was watching anew.
var errStopped = errors.New("registry view stopped")

func watchRegistry(ctx context.Context, kv jetstream.KeyValue, log logrus.FieldLogger, saw func(*bus.WorkerEntry)) (*registryView, error) {
	v := &registryView{kv: kv, log: log, saw: saw, workers: map[string]seenEntry{}}
	v.ctx, v.cancel = context.WithCancel(context.Background())
	if err := v.rewatch(ctx); err != nil {
		v.stop()
		return nil, err
	}
	v.wg.Add(1)
	go v.guard()
	return v, nil
}

// rewatch starts a new watch, waits for its initial values and makes them
// the view. ctx bounds the wait (and the watch's creation); the watch itself
// lives until it is replaced or the view stops.
func (v *registryView) rewatch(ctx context.Context) error {
	wctx, wcancel := context.WithCancel(v.ctx)
	// Until its initial values are in, the watch also ends with ctx.
	unbind := context.AfterFunc(ctx, wcancel)
	w, err := v.kv.WatchAll(wctx)
	if err != nil {
		unbind()
		wcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	fresh := map[string]seenEntry{}
	for {
		select {
		case u, ok := <-w.Updates():
			if !ok { // the watch ended: nats.go closes it on its own
				unbind()
				wcancel()
				return errWatchClosed
			}
			if u != nil {
				v.apply(fresh, u)
				continue
			}
			// Initial values done.
			if !unbind() {
				// ctx ended just now, and wcancel with it.
				v.discard(w, wcancel)
				return ctx.Err()
			}
			v.mu.Lock()
			if v.stopped {
				v.mu.Unlock()
				v.discard(w, wcancel)
				return errStopped
			}
			endOld := v.wcancel
			v.gen++
			gen := v.gen
			v.wcancel, v.workers, v.lastMsg = wcancel, fresh, time.Now()
			v.set = nil
			// Added under mu while not stopped: stop, which sets stopped
			// under mu, waits for this goroutine too.
			v.wg.Add(1)
			v.mu.Unlock()
			go v.follow(w, gen)
			if endOld != nil {
				endOld()
			}
			return nil
		case <-ctx.Done():
			unbind()
			v.discard(w, wcancel)
			return ctx.Err()
		}
	}
}

// discard ends a watch that no goroutine follows, and reads what it still
// delivers until it closes: nats.go's callback blocks on a full updates
// channel, and would keep the subscription's goroutine forever.
func (v *registryView) discard(w jetstream.KeyWatcher, wcancel context.CancelFunc) {
	wcancel()
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		for range w.Updates() {
		}
	}()
}

// follow applies a watch's updates while it is the current one. It reads
// until the watch closes (it ends when replaced, and at stop), so that
// nats.go's delivery goroutine never blocks on a full channel.
func (v *registryView) follow(w jetstream.KeyWatcher, gen int) {
	defer v.wg.Done()
	for u := range w.Updates() {
		if u == nil {
			continue
		}
		v.mu.Lock()
		if v.gen == gen {
			v.apply(v.workers, u)
			v.lastMsg = time.Now()
			v.set = nil
		}
		v.mu.Unlock()
	}
}

func (v *registryView) apply(m map[string]seenEntry, u jetstream.KeyValueEntry) {
	switch u.Operation() {
	case jetstream.KeyValuePut:
		var e bus.WorkerEntry
		if err := json.Unmarshal(u.Value(), &e); err != nil || e.Validate() != nil {
			v.log.WithField("worker", u.Key()).Warn("ignoring an invalid registry entry")
			delete(m, u.Key())
			return
		}
		m[u.Key()] = seenEntry{entry: e, seen: time.Now()}
		if v.saw != nil {
			v.saw(&e)
		}
	default:
		delete(m, u.Key())
	}
}

// rewatchTimeout bounds one attempt to watch anew; the guard tries again
// on its next tick.
const rewatchTimeout = 5 * time.Second

// guard replaces a watch that has gone silent.
func (v *registryView) guard() {
	defer v.wg.Done()
	t := time.NewTicker(bus.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-v.ctx.Done():
			return
		case <-t.C:
		}
		v.mu.Lock()
		silent := time.Since(v.lastMsg)
		v.mu.Unlock()
		if silent <= staleAfter {
			continue
		}
		v.log.Debugf("registry: the watch has been silent for %s; watching anew", silent.Round(time.Second))
		ctx, cancel := context.WithTimeout(v.ctx, rewatchTimeout)
		if err := v.rewatch(ctx); err != nil && v.ctx.Err() == nil {
			v.log.Debug("registry: watching anew failed (retrying): " + err.Error())
		}
		cancel()
	}
}

// stop ends the view: the end of its context cancels a re-watch in progress
// and ends every watch (each one's context derives from it). It returns once
// every goroutine of the view has ended: the guard, and the readers of the
// watches, which end as soon as nats.go has removed their subscriptions. It
// may be called more than once.
func (v *registryView) stop() {
	v.mu.Lock()
	v.stopped = true
	v.gen++
	v.mu.Unlock()
	v.cancel()
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
