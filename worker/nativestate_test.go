package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// diskHarness keeps each session's history in a file of its own directory
// (one per worker: they share no disk) and resumes only from that file, as
// Codex resumes from its rollout: a turn of a session with a binding and no
// local file fails. Its binding counts the turns; its reply is the history.
// A prompt "big" writes more than the tests' state bound.
type diskHarness struct{ dir string }

type diskBinding struct {
	Session string `json:"session"`
	Turns   int    `json:"turns"`
	// Lose makes ExportState call afterExport: the turn's prompt was "lose".
	Lose bool `json:"lose,omitempty"`
}

// afterExport, when set, runs inside ExportState of a turn whose prompt was
// "lose", between the turn and the upload of its state.
var afterExport func(sessionTag string)

var _ harness.StateCarrier = (*diskHarness)(nil)

func (h *diskHarness) Manifest() selection.Manifest {
	return selection.Manifest{ID: "disk", Label: "Disk", PluginID: "disk", Injection: selection.InjectionNone}
}

func (h *diskHarness) Supports(*bus.Attempt) (bool, string) { return true, "" }

func (h *diskHarness) file(session string) string {
	return filepath.Join(h.dir, "sessions", session+".txt")
}

func (h *diskHarness) RunAttempt(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	b := diskBinding{Session: leases.Tag(run.Attempt.SessionKey)}
	var history []byte
	if len(run.Binding) > 0 {
		if err := json.Unmarshal(run.Binding, &b); err != nil {
			return nil, err
		}
		var err error
		if history, err = os.ReadFile(h.file(b.Session)); err != nil {
			return nil, fmt.Errorf("no local state to resume turn %d: %w", b.Turns+1, err)
		}
	}
	add := run.Attempt.Prompt
	if add == "big" {
		add = strings.Repeat("x", 16384)
	}
	history = append(history, []byte(add+" ")...)
	if err := os.MkdirAll(filepath.Dir(h.file(b.Session)), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(h.file(b.Session), history, 0o600); err != nil {
		return nil, err
	}
	b.Turns++
	b.Lose = run.Attempt.Prompt == "lose"
	nb, _ := json.Marshal(b)
	return &harness.Outcome{AssistantTexts: []string{strings.TrimSpace(string(history))}, NativeSession: nb}, nil
}

func (h *diskHarness) ExportState(ctx context.Context, raw json.RawMessage) ([]byte, error) {
	var b diskBinding
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	if b.Lose && afterExport != nil {
		afterExport(b.Session)
	}
	return harness.PackFiles(h.dir, []string{"sessions/" + b.Session + ".txt"})
}

func (h *diskHarness) ImportState(ctx context.Context, raw json.RawMessage, blob []byte) error {
	_, err := harness.UnpackFiles(h.dir, blob, nil)
	return err
}

// diskDirs maps a worker id to its diskHarness's directory.
var diskDirs sync.Map

func init() {
	worker.RegisterImplementation("disk", func(m selection.Manifest, raw json.RawMessage, env worker.FactoryEnv) (harness.Harness, error) {
		var s struct {
			Dir string `json:"dir"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return &diskHarness{dir: s.Dir}, nil
	})
}

const diskStateMax = 8192

func diskFleet(t *testing.T) *fleettest.Fleet {
	return fleettest.Start(t, fleettest.Options{Workers: 2, WorkerConfig: func(id string, slots int) *worker.Config {
		dir := t.TempDir()
		diskDirs.Store(id, dir)
		cfg := worker.DevConfig(id, slots)
		cfg.MaxNativeStateBytes = diskStateMax
		settings, _ := json.Marshal(map[string]string{"dir": dir})
		cfg.Harnesses = append(cfg.Harnesses, worker.HarnessConfig{Implementation: "disk", Settings: settings,
			Manifest: (&diskHarness{}).Manifest()})
		return cfg
	}})
}

func diskAttempt(session, prompt string) *bus.Attempt {
	a := fleettest.Attempt(session, prompt)
	a.AgentHarnessID = "disk"
	a.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"disk"}}, RequestTransportOverrides: "none"}
	return a
}

// stateObjects lists TEAMSTER_NATIVE_STATE's objects once it holds n
// (testenv.StateObjectsSettled).
func stateObjects(t *testing.T, f *fleettest.Fleet, n int) []string {
	t.Helper()
	return testenv.StateObjectsSettled(t, f.Connect("inspect-state"), n)
}

func sessionRecord(t *testing.T, f *fleettest.Fleet, key string) *teamster.SessionRecord {
	t.Helper()
	rec, err := leases.NewStore(f.RDB).Session(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// A session's native state follows it to a worker that shares no disk with
// the one that ran its last turn: saved after each turn under the turn's
// fence, named by the record, restored before the next turn; the replaced
// object is deleted; state over the bound fails the turn with a clear error
// and leaves the record as it was; a reset deletes the state.
func TestNativeStateFollowsTheSession(t *testing.T) {
	f := diskFleet(t)
	const key = "agent:main:disk"
	r1 := result(t, submit(t, f.Client, diskAttempt(key, "a")))
	if r1.Status != teamster.StatusOK {
		t.Fatalf("turn 1: %+v (error %v)", r1, r1.Error)
	}
	rec := sessionRecord(t, f, key)
	if want := bus.StateObjectName(leases.Tag(key), r1.Fence); rec.NativeState != want {
		t.Fatalf("the record names state %q, want %q (turn 1's fence)", rec.NativeState, want)
	}

	// Turn 2 runs on the other worker: the first drains.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := f.Worker(r1.WorkerID).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := result(t, submit(t, f.Client, diskAttempt(key, "b")))
	if r2.Status != teamster.StatusOK || r2.WorkerID == r1.WorkerID {
		t.Fatalf("turn 2: %+v (error %v), want ok on the other worker than %s", r2, r2.Error, r1.WorkerID)
	}
	if got := r2.AssistantTexts[0]; got != "a b" {
		t.Fatalf("turn 2 on %s replied %q, want %q: it did not resume turn 1's state", r2.WorkerID, got, "a b")
	}
	dir, _ := diskDirs.Load(r2.WorkerID)
	if _, err := os.Stat(filepath.Join(dir.(string), "sessions", leases.Tag(key)+".txt")); err != nil {
		t.Fatalf("the state was not restored into %s's directory: %v", r2.WorkerID, err)
	}
	want2 := bus.StateObjectName(leases.Tag(key), r2.Fence)
	if rec := sessionRecord(t, f, key); rec.NativeState != want2 {
		t.Fatalf("after turn 2 the record names %q, want %q", rec.NativeState, want2)
	}
	if names := stateObjects(t, f, 1); len(names) != 1 || names[0] != want2 {
		t.Fatalf("objects %q, want only turn 2's %q (turn 1's deleted once turn 2 committed)", names, want2)
	}

	// State over maxNativeStateBytes: the turn fails, saying so; the record
	// keeps turn 2's binding and state.
	r3 := result(t, submit(t, f.Client, diskAttempt(key, "big")))
	if r3.Error == nil || r3.Error.Code != teamster.CodeHarnessFailed || r3.Error.SideEffects != teamster.SideEffectsPossible ||
		!strings.Contains(r3.Error.Message, "maxNativeStateBytes") {
		t.Fatalf("turn 3 (state over the bound): %+v, want harness_failed naming maxNativeStateBytes", r3.Error)
	}
	if rec := sessionRecord(t, f, key); rec.NativeState != want2 || !strings.Contains(rec.NativeBinding, `"turns":2`) {
		t.Fatalf("after the failed save the record is %+v, want turn 2's binding and state", rec)
	}
	if names := stateObjects(t, f, 1); len(names) != 1 || names[0] != want2 {
		t.Fatalf("objects %q after the failed save, want only %q", names, want2)
	}

	// A reset forgets the binding and deletes the state.
	if err := f.Client.SessionOp(ctx, leases.OpReset, bus.SessionOp{V: bus.Version, SessionKey: key}); err != nil {
		t.Fatal(err)
	}
	if rec := sessionRecord(t, f, key); rec.NativeState != "" || rec.NativeBinding != "" {
		t.Fatalf("after the reset the record is %+v, want no binding and no state", rec)
	}
	if names := stateObjects(t, f, 0); len(names) != 0 {
		t.Fatalf("objects %q after the reset, want none", names)
	}
}

// A record that names state the object store does not hold fails the turn
// before the harness starts (sideEffects none), instead of the harness
// starting afresh without a word.
func TestMissingNativeStateFailsTheTurnBeforeItStarts(t *testing.T) {
	f := diskFleet(t)
	const key = "agent:main:disk-missing"
	r1 := result(t, submit(t, f.Client, diskAttempt(key, "a")))
	if r1.Status != teamster.StatusOK {
		t.Fatalf("turn 1: %+v (error %v)", r1, r1.Error)
	}
	js, err := jetstream.New(f.Connect("delete-state"))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(t.Context(), bus.BucketNativeState)
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(t.Context(), sessionRecord(t, f, key).NativeState); err != nil {
		t.Fatal(err)
	}
	r2 := result(t, submit(t, f.Client, diskAttempt(key, "b")))
	if r2.Error == nil || r2.Error.Code != teamster.CodeHarnessFailed || r2.Error.SideEffects != teamster.SideEffectsNone ||
		!strings.Contains(r2.Error.Message, "missing") {
		t.Fatalf("turn 2: %+v, want harness_failed (sideEffects none) saying the state is missing", r2.Error)
	}
}

// The shipped example worker configs load.
func TestExampleConfigsLoad(t *testing.T) {
	paths, err := filepath.Glob("../examples/worker*.json")
	if err != nil || len(paths) < 2 {
		t.Fatalf("example worker configs %q (%v)", paths, err)
	}
	for _, p := range paths {
		if _, err := worker.LoadConfig(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// Fenced: a turn whose lease is lost after the harness ran, while its state
// is being saved, commits nothing: the record keeps the state of the turn
// before, and the object the stale turn uploaded is deleted, so no later
// turn can restore it.
func TestAStaleTurnsStateIsNeverNamed(t *testing.T) {
	f := diskFleet(t)
	const key = "agent:main:disk-stale"
	r1 := result(t, submit(t, f.Client, diskAttempt(key, "a")))
	if r1.Status != teamster.StatusOK {
		t.Fatalf("turn 1: %+v (error %v)", r1, r1.Error)
	}
	want1 := bus.StateObjectName(leases.Tag(key), r1.Fence)
	afterExport = func(tag string) {
		// The lease goes: what a Redis failover or an expiry during a pause
		// does to the holder.
		if err := f.RDB.Del(context.Background(), "teamster:{"+tag+"}:lease").Err(); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterExport = nil }()
	r2 := result(t, submit(t, f.Client, diskAttempt(key, "lose")))
	if r2.Error == nil || r2.Error.Code != teamster.CodeLeaseLost {
		t.Fatalf("turn 2, whose lease went during the save: %+v (error %v), want lease_lost", r2, r2.Error)
	}
	if rec := sessionRecord(t, f, key); rec.NativeState != want1 || !strings.Contains(rec.NativeBinding, `"turns":1`) {
		t.Fatalf("after the stale turn the record is %+v, want turn 1's binding and state %s", rec, want1)
	}
	if names := stateObjects(t, f, 1); len(names) != 1 || names[0] != want1 {
		t.Fatalf("objects %q, want only turn 1's %s: the stale turn's upload was left", names, want1)
	}
}
