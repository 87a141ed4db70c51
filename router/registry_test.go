package router

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/selection"
)

// The router prepares the registry for selection once per change; these
// tests check that the prepared set follows the registry: puts, deletes,
// draining and stopped workers, and entries that expire without a delete.

func newRegistry(t *testing.T) (jetstream.KeyValue, *registryView) {
	t.Helper()
	_, js := testenv.NewNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, _, err := bus.Setup(ctx, js, bus.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	v, err := watchRegistry(ctx, kv, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.stop)
	return kv, v
}

func putWorker(t *testing.T, kv jetstream.KeyValue, id, state string, harnesses ...string) {
	t.Helper()
	e := bus.WorkerEntry{V: bus.Version, WorkerID: id, State: state, Slots: 1, HeartbeatMs: time.Now().UnixMilli()}
	for _, h := range harnesses {
		e.Harnesses = append(e.Harnesses, selection.Manifest{ID: h, Label: h, PluginID: h})
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), id, b); err != nil {
		t.Fatal(err)
	}
}

// ids returns the ids of the prepared set, in probe order.
func ids(h *selection.Harnesses) []string {
	var out []string
	for _, m := range h.List() {
		out = append(out, m.ID)
	}
	return out
}

// waitSet waits until the prepared set holds exactly want (in probe order).
func waitSet(t *testing.T, v *registryView, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := ids(v.harnesses())
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prepared harnesses %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPreparedHarnessesFollowTheRegistry(t *testing.T) {
	kv, v := newRegistry(t)
	waitSet(t, v)

	putWorker(t, kv, "w1", bus.WorkerActive, "codex")
	waitSet(t, v, "codex")
	first := v.harnesses()
	if v.harnesses() != first {
		t.Fatal("the prepared set was rebuilt although the registry did not change")
	}

	putWorker(t, kv, "w2", bus.WorkerActive, "claude-cli", "codex")
	waitSet(t, v, "claude-cli", "codex")

	putWorker(t, kv, "w2", bus.WorkerDraining, "claude-cli", "codex")
	waitSet(t, v, "claude-cli", "codex") // a draining worker still counts

	putWorker(t, kv, "w2", bus.WorkerStopped, "claude-cli", "codex")
	waitSet(t, v, "codex")
	// Fail closed: a session pinned to the harness only the stopped worker
	// hosted is refused, not switched.
	pinned := selection.Facts{Provider: "anthropic", ModelID: "m", AgentHarnessID: "claude-cli"}
	if _, err := v.harnesses().Select(nil, pinned); !errors.Is(err, teamster.ErrHarnessNotRegistered) {
		t.Fatalf("a pin to a harness no live worker registers: %v, want harness_not_registered", err)
	}

	if err := kv.Delete(context.Background(), "w1"); err != nil {
		t.Fatal(err)
	}
	waitSet(t, v)
}

func TestPreparedHarnessesDropAnEntryThatExpired(t *testing.T) {
	kv, v := newRegistry(t)
	putWorker(t, kv, "w1", bus.WorkerActive, "codex")
	putWorker(t, kv, "w2", bus.WorkerActive, "claude-cli")
	waitSet(t, v, "claude-cli", "codex")

	// w1 went silent: its entry was last heard from longer ago than the
	// bucket TTL (the KV expires it without a delete notice). The watch is
	// still trusted (it heard from w2 just now).
	v.mu.Lock()
	s := v.workers["w1"]
	s.seen = time.Now().Add(-bus.WorkersTTL - time.Second)
	v.workers["w1"] = s
	v.setUntil = s.seen.Add(bus.WorkersTTL)
	v.lastMsg = time.Now()
	v.mu.Unlock()
	if got := ids(v.harnesses()); !slices.Equal(got, []string{"claude-cli"}) {
		t.Fatalf("prepared harnesses %v after w1 expired, want [claude-cli]", got)
	}

	// While the watch is suspect (silent past staleAfter), nothing expires.
	putWorker(t, kv, "w1", bus.WorkerActive, "codex")
	waitSet(t, v, "claude-cli", "codex")
	v.mu.Lock()
	for id, s := range v.workers {
		s.seen = time.Now().Add(-bus.WorkersTTL - time.Second)
		v.workers[id] = s
	}
	v.setUntil = time.Now().Add(-time.Second)
	v.lastMsg = time.Now().Add(-staleAfter - time.Second)
	v.mu.Unlock()
	if got := ids(v.harnesses()); !slices.Equal(got, []string{"claude-cli", "codex"}) {
		t.Fatalf("prepared harnesses %v while the watch is suspect, want both kept", got)
	}
}
