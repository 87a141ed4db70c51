package fleet_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/fleet"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

func TestWorkerTuning(t *testing.T) {
	def := worker.DevConfig("w1", 8)
	if got := (fleet.WorkerTuning{}).DevWorker("w1", 8); got.LeaseTTLMs != def.LeaseTTLMs || got.DrainTimeoutMs != def.DrainTimeoutMs || got.NewEpochQuarantineMs != 0 {
		t.Fatalf("the zero tuning changed the config: %+v", got)
	}
	got := fleet.WorkerTuning{LeaseTTL: 2 * time.Second, DrainTimeout: 300 * time.Millisecond, FreshRedis: true}.DevWorker("w1", 8)
	if got.LeaseTTLMs != 2000 || got.DrainTimeoutMs != 300 || got.NewEpochQuarantineMs != -1 || got.Slots != 8 || got.WorkerID != "w1" {
		t.Fatalf("tuned config %+v", got)
	}
}

func TestDaemonArgs(t *testing.T) {
	for _, c := range []struct {
		o    fleet.Options
		want []string
	}{
		{fleet.Options{NATSURL: "nats://n:4222", Redis: cmdutil.Common{RedisURL: "redis://r:6379/0"}},
			[]string{"--nats-url", "nats://n:4222", "--redis-url", "redis://r:6379/0"}},
		{fleet.Options{NATSURL: "nats://a,nats://b", Redis: cmdutil.Common{RedisURL: "redis://s:26379/0?master_name=m", RedisMode: cmdutil.RedisSentinel},
			Streams: bus.StreamOptions{Replicas: 3}},
			[]string{"--nats-url", "nats://a,nats://b", "--redis-mode", "sentinel", "--redis-url", "redis://s:26379/0?master_name=m", "--stream-replicas", "3"}},
	} {
		if got := c.o.DaemonArgs(); !slices.Equal(got, c.want) {
			t.Errorf("DaemonArgs() = %q, want %q", got, c.want)
		}
	}
}

func TestWait(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := fleet.Wait(ctx, time.Second, time.Millisecond, func(context.Context) (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("Wait = %v after %d checks, want nil after 3", err, n)
	}
	if err := fleet.Wait(ctx, 20*time.Millisecond, time.Millisecond, func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, fleet.ErrTimeout) {
		t.Fatalf("Wait = %v, want ErrTimeout", err)
	}
	gone := errors.New("exited")
	if err := fleet.Wait(ctx, time.Minute, time.Millisecond, func(context.Context) (bool, error) { return false, gone }); err != gone {
		t.Fatalf("Wait = %v, want the condition's error at once", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := fleet.Wait(cctx, time.Minute, time.Millisecond, func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// A fleet on servers it started serves an attempt, records its run in the
// test ledger, serves its daemons' readiness, and Close leaves nothing
// running (TestMain checks for goroutines left behind).
func TestFleet(t *testing.T) {
	dir := t.TempDir()
	nsrv, err := fleet.StartNATS(0, filepath.Join(dir, "jetstream"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.StopNATS(nsrv)
	rsrv, err := fleet.StartRedis(filepath.Join(dir, "redis"))
	if err != nil {
		t.Fatal(err)
	}
	defer rsrv.Kill()
	ledger := &scripted.MemoryLedger{}
	f := fleet.New(fleet.Options{NATSURL: fleet.NATSURL(nsrv), Redis: fleet.RedisOf(rsrv), ServeMetrics: true,
		Workers: fleet.WorkerTuning{FreshRedis: true, LeaseTTL: 2 * time.Second}, Test: fleet.TestHooks{Ledger: ledger}})
	defer f.Close()
	ctx := context.Background()
	if _, err := f.StartRouter(ctx, fleet.RouterOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2"} {
		if _, err := f.StartWorker(ctx, worker.DevConfig(id, 4)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.WaitWorkers(ctx, 2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitHarnesses(ctx, map[string]int{"codex": 2, "claude-cli": 2}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitHarnesses(ctx, map[string]int{"codex": 3}, 50*time.Millisecond); err == nil {
		t.Fatal("WaitHarnesses saw a third codex worker")
	}
	for _, name := range []string{"router", "w1", "w2"} {
		u := f.MetricsURL(name)
		if u == "" {
			t.Fatalf("no metrics server for %s", name)
		}
		if err := fleet.Readyz(ctx, u[len("http://"):]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if ws := f.Workers(); len(ws) != 2 || ws[0].ID() != "w1" || ws[1].ID() != "w2" {
		t.Fatalf("Workers() = %v", ws)
	}
	nc, err := f.ConnectNATS("client")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := &bus.Attempt{V: bus.Version, AgentID: "main", SessionKey: "fleet:1", SessionID: "sid-fleet:1", StorePath: "/var/openclaw/fleet:1",
		Provider: "openai", ModelID: "gpt-5.6-sol", Prompt: "hello",
		ModelProvider: &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}}, RequestTransportOverrides: "none"}}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := c.Submit(sctx, a)
	if err != nil || h.Reply.Status != bus.StatusAccepted {
		t.Fatalf("submit: %v %+v", err, h)
	}
	defer h.Close()
	r, err := h.Result(sctx)
	if err != nil || len(r.AssistantTexts) != 1 || r.AssistantTexts[0] != "hello" {
		t.Fatalf("result %+v (%v)", r, err)
	}
	if err := scripted.CheckLedger(ledger.Entries()); err != nil || len(ledger.Entries()) == 0 {
		t.Fatalf("ledger %v (%v)", ledger.Entries(), err)
	}
}
