package e2e

import (
	"encoding/json"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
)

// One attempt end to end: accepted with its selection, claimed, events in seq
// order without gaps, one ok result, durable, and the session record pinned.
func TestOneAttemptEndToEnd(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	h := submit(t, f, fleettest.Attempt("sess-1", fleettest.Script(`{"say":"hello"}`, `{"reason":"thinking"}`, `{"say":"world"}`)))
	if h.Reply.HarnessID != "codex" || h.Reply.Selection == nil || h.Reply.Selection.SelectedReason != "auto_plugin" {
		t.Fatalf("reply %+v", h.Reply)
	}
	var seqs []int64
	var types []string
	for e := range h.Events() {
		seqs = append(seqs, e.Seq)
		types = append(types, e.Type)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("event seqs %v, want 1..n without gaps", seqs)
		}
	}
	if types[0] != bus.EventClaimed || types[len(types)-1] != bus.EventResult {
		t.Fatalf("event types %v, want claimed first and result last", types)
	}
	r := result(t, h)
	if r.Status != teamster.StatusOK || len(r.AssistantTexts) != 2 || r.AssistantTexts[0] != "hello" || r.WorkerID != "w1" {
		t.Fatalf("result %+v", r)
	}
	durable, err := f.Client.Result(t.Context(), h.AttemptID())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(r)
	b, _ := json.Marshal(durable)
	if string(a) != string(b) {
		t.Fatalf("durable result %s differs from the event's %s", b, a)
	}
	rec, err := leases.NewStore(f.RDB).Session(t.Context(), "sess-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.AgentHarnessID != "codex" || rec.OwnerPluginID != "codex" || rec.SessionID != "sid-sess-1" || rec.NativeBinding == "" {
		t.Fatalf("session record %+v", rec)
	}
}

// Events read only after the result: the handle kept every event (it makes
// its events channel on the first call of Events), in order, result last,
// and the channel is closed.
func TestEventsReadAfterTheResult(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	h := submit(t, f, fleettest.Attempt("sess-late", fleettest.Script(`{"say":"one"}`, `{"say":"two"}`)))
	r := result(t, h)
	var types []string
	var seqs []int64
	for e := range h.Events() {
		types = append(types, e.Type)
		seqs = append(seqs, e.Seq)
	}
	want := []string{bus.EventClaimed, bus.EventPartial, bus.EventPartial, bus.EventResult}
	if len(types) != len(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] || seqs[i] != int64(i+1) {
			t.Fatalf("events %v (seqs %v), want %v in seq order 1..%d", types, seqs, want, len(want))
		}
	}
	if r.Status != teamster.StatusOK || h.Dropped() != 0 {
		t.Fatalf("result %s, %d events dropped", r.Status, h.Dropped())
	}
}
