package codex_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/codex"
	"github.com/teamster-fleet/teamster/harness/codex/codextest"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// The acceptance tests run the real app-server through a real fleet: a
// private redis-server, an embedded NATS, a router, workers hosting the codex
// harness, the gateway API. Only the model endpoint is a stand-in
// (codextest.Endpoint).

// secretKey is the test provider's API key: it travels in the harness
// settings' env and must never appear in a log.
const secretKey = "sk-teamster-test-0123456789-SECRET"

// waitTimeout bounds every wait (a liveness bound, not a timing assertion).
const waitTimeout = 90 * time.Second

func init() {
	worker.RegisterImplementation("codex", testFactory)
}

// building says which fleet and worker the factory is building a harness
// for; startWorker holds it while worker.New runs. Tests of this package do
// not run in parallel.
var building struct {
	mu sync.Mutex
	f  *fleet
	id string
}

// testFactory is codex.Factory plus the test's hooks: the harness reports
// its protocol to the fleet's trace, and is closed when the test ends.
func testFactory(m selection.Manifest, settings json.RawMessage, _ worker.FactoryEnv) (harness.Harness, error) {
	f, id := building.f, building.id
	h, err := codex.Factory(m, settings, f.log.WithField("proc", id))
	if err != nil {
		return nil, err
	}
	ch := h.(*codex.Harness)
	codex.SetTrace(ch, func(dir, method string) { f.trace.add(id, dir, method) })
	f.harnesses[id] = ch
	f.t.Cleanup(func() { _ = ch.Close() })
	return ch, nil
}

// fleet is one test's fleet.
type fleet struct {
	t         *testing.T
	endpoint  *codextest.Endpoint
	home      string // CODEX_HOME shared by the workers
	workdir   string // the threads' working directory
	redis     *testenv.Redis
	nats      *testenv.NATS
	router    *router.Router
	client    *client.Client
	log       *logrus.Logger
	logs      *syncBuffer
	trace     *tracer
	harnesses map[string]*codex.Harness
	workers   map[string]*worker.Worker
	live      int // workers started and not drained
}

// newFleet starts NATS, Redis, a router, a client and the model endpoint
// playing replies; workers are started by the test.
func newFleet(t *testing.T, replies ...codextest.Reply) *fleet {
	t.Helper()
	codextest.Binary(t) // fails (never skips) when codex is not installed
	f := &fleet{t: t, logs: &syncBuffer{}, trace: &tracer{}, harnesses: map[string]*codex.Harness{}, workers: map[string]*worker.Worker{}}
	f.endpoint = codextest.NewEndpoint(t, replies...)
	f.home = codextest.NewHome(t, f.endpoint)
	f.workdir = t.TempDir()
	f.log = logrus.New()
	f.log.SetLevel(logrus.DebugLevel)
	var out io.Writer = f.logs
	if os.Getenv("TEAMSTER_TEST_VERBOSE") != "" {
		out = io.MultiWriter(f.logs, testWriter{t})
	}
	f.log.SetOutput(out)
	f.redis = testenv.NewRedis(t)
	f.nats = testenv.NewNATS(t)

	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	r, err := router.New(router.Params{NATS: f.connect("router"), Redis: rdb, Logger: f.log.WithField("proc", "router"),
		ReaperInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	f.router = r
	c, err := client.New(f.connect("client"))
	if err != nil {
		t.Fatal(err)
	}
	f.client = c
	return f
}

func (f *fleet) connect(name string) *nats.Conn {
	f.t.Helper()
	nc, err := nats.Connect(f.nats.URL(), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

// settings are the harness settings of the fleet's workers: the shared
// CODEX_HOME, the work dir, the provider key.
func (f *fleet) settings() codex.Settings {
	return codex.Settings{CodexHome: f.home, Cwd: f.workdir, Env: map[string]string{codextest.KeyEnv: secretKey}}
}

// manifest is the codex harness's manifest in these tests.
var manifest = selection.Manifest{
	ID: "codex", Label: "Codex", PluginID: "codex",
	AutoSelection: &selection.AutoSelection{ProviderIDs: []string{"openai"}}, Priority: 100,
	Injection: selection.InjectionV2,
}

// startWorker starts a worker hosting the codex harness with settings s and
// waits until the router sees it.
func (f *fleet) startWorker(id string, s codex.Settings) *worker.Worker {
	f.t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		f.t.Fatal(err)
	}
	b, err := json.Marshal(worker.Config{WorkerID: id, Slots: 8, LeaseTTLMs: 3000, DrainTimeoutMs: 30000,
		Harnesses: []worker.HarnessConfig{{Implementation: "codex", Settings: raw, Manifest: manifest}}})
	if err != nil {
		f.t.Fatal(err)
	}
	cfg, err := worker.ParseConfig(b)
	if err != nil {
		f.t.Fatal(err)
	}
	nc, err := nats.Connect(f.nats.URL(), nats.Name(id), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		f.t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	building.mu.Lock()
	building.f, building.id = f, id
	w, err := worker.New(worker.Params{Config: cfg, NATS: nc, Redis: rdb, Logger: f.log.WithField("proc", id)})
	building.f, building.id = nil, ""
	building.mu.Unlock()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if w.Drain(ctx) != nil {
			w.Kill()
		}
		nc.Close()
		rdb.Close()
	})
	f.workers[id] = w
	f.live++
	f.waitRegistered(f.live)
	return w
}

// waitRegistered waits until the router sees n live workers' harnesses.
func (f *fleet) waitRegistered(n int) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if len(f.router.Manifests()) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatalf("the router does not see %d codex workers", n)
}

// drain drains a worker and waits until it stopped.
func (f *fleet) drain(id string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := f.workers[id].Drain(ctx); err != nil {
		f.t.Fatalf("drain %s: %v", id, err)
	}
	f.live--
}

// attempt is a prepared attempt for session pinned to harness codex.
func attempt(session, prompt string) *bus.Attempt {
	return &bus.Attempt{
		V: bus.Version, AgentID: "main", SessionKey: session, SessionID: "sid-" + session, StorePath: "/var/openclaw/" + session,
		Provider: "openai", ModelID: codextest.Model, AgentHarnessID: "codex",
		ModelProvider: &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}}, RequestTransportOverrides: "none"},
		Prompt:        prompt, TimeoutMs: 120_000,
	}
}

func (f *fleet) submit(a *bus.Attempt) *client.Handle {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := f.client.Submit(ctx, a)
	if err != nil {
		f.t.Fatalf("submit: %v", err)
	}
	if h.Reply.Status != bus.StatusAccepted {
		f.t.Fatalf("submit: %+v, want accepted", h.Reply)
	}
	f.t.Cleanup(h.Close)
	return h
}

// run submits an attempt and returns its events (result last) and result.
func (f *fleet) run(a *bus.Attempt) ([]bus.Event, *bus.Result) {
	f.t.Helper()
	h := f.submit(a)
	return collect(f.t, h), result(f.t, h)
}

// collect reads a handle's events until the result event.
func collect(t *testing.T, h *client.Handle) []bus.Event {
	t.Helper()
	var evs []bus.Event
	timeout := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-h.Events():
			if !ok {
				return evs
			}
			evs = append(evs, e)
		case <-timeout:
			t.Fatalf("no result event after %s; events so far: %d", waitTimeout, len(evs))
		}
	}
}

func result(t *testing.T, h *client.Handle) *bus.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	r, err := h.Result(ctx)
	if err != nil {
		t.Fatalf("result of %s: %v", h.AttemptID(), err)
	}
	return r
}

// partialText joins the text of the partial events.
func partialText(t *testing.T, evs []bus.Event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range evs {
		if e.Type != bus.EventPartial {
			continue
		}
		var d bus.PartialData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		b.WriteString(d.Text)
	}
	return b.String()
}

// usageEvents are the cumulative output tokens of the usage events.
func usageEvents(t *testing.T, evs []bus.Event) []int64 {
	t.Helper()
	var out []int64
	for _, e := range evs {
		if e.Type == bus.EventUsage {
			var u bus.UsageData
			if err := json.Unmarshal(e.Data, &u); err != nil {
				t.Fatal(err)
			}
			out = append(out, u.OutputTokens)
		}
	}
	return out
}

// threadOf reads the thread id of a result's native session.
func threadOf(t *testing.T, r *bus.Result) string {
	t.Helper()
	var b struct {
		ThreadID string `json:"threadId"`
	}
	if err := json.Unmarshal(r.NativeSession, &b); err != nil || b.ThreadID == "" {
		t.Fatalf("native session %s is not a codex binding (%v)", r.NativeSession, err)
	}
	return b.ThreadID
}

// wantOK fails unless r is ok.
func wantOK(t *testing.T, r *bus.Result) {
	t.Helper()
	if r.Status != "ok" {
		t.Fatalf("result %s: status %s, error %+v", r.AttemptID, r.Status, r.Error)
	}
}

// tracer records the protocol messages each worker's harness sent and
// received.
type tracer struct {
	mu  sync.Mutex
	log []traced
}

type traced struct{ worker, dir, method string }

func (tr *tracer) add(worker, dir, method string) {
	tr.mu.Lock()
	tr.log = append(tr.log, traced{worker, dir, method})
	tr.mu.Unlock()
}

// count is how many times worker's harness sent (dir "send") or received
// ("recv") method.
func (tr *tracer) count(worker, dir, method string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, e := range tr.log {
		if e.worker == worker && e.dir == dir && e.method == method {
			n++
		}
	}
	return n
}

// sent lists the methods worker's harness sent, in order.
func (tr *tracer) sent(worker string) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for _, e := range tr.log {
		if e.worker == worker && e.dir == "send" {
			out = append(out, e.method)
		}
	}
	return out
}

// gateway answers the host callbacks of attempts with its hostId, as a
// gateway would: tool calls with result, terminal reports with ok, usage
// with ok. It records what it was asked.
type gateway struct {
	mu        sync.Mutex
	result    any
	fail      bool // refuse tool calls, and keep the failure as the last tool error
	calls     []bus.ToolCall
	terminals []bus.ToolTerminal
	usage     []bus.UsageReport
	others    []string // calls this gateway does not answer (userInput)
}

func (f *fleet) serveGateway(hostID string, result any) *gateway {
	f.t.Helper()
	g := &gateway{result: result}
	nc := f.connect("gateway-" + hostID)
	sub, err := nc.Subscribe("teamster.host."+hostID+".>", g.serve)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return g
}

func (g *gateway) serve(m *nats.Msg) {
	call := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	respond := func(v any) {
		if b, err := bus.Encode(v); err == nil {
			_ = m.Respond(b)
		}
	}
	switch call {
	case bus.HostCallTool:
		var c bus.ToolCall
		if err := bus.Decode(m.Data, &c); err != nil {
			respond(&bus.ToolReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
			return
		}
		g.mu.Lock()
		g.calls = append(g.calls, c)
		res, _ := json.Marshal(g.result)
		fail := g.fail
		g.mu.Unlock()
		if fail {
			respond(&bus.ToolReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.Errorf(teamster.CodeHarnessFailed, "the lookup service is down")})
			return
		}
		respond(&bus.ToolReply{V: bus.Version, Status: bus.StatusOK, Result: res})
	case bus.HostCallToolTerminal:
		var tt bus.ToolTerminal
		_ = bus.Decode(m.Data, &tt)
		g.mu.Lock()
		g.terminals = append(g.terminals, tt)
		g.mu.Unlock()
		var last json.RawMessage
		if tt.Outcome == bus.OutcomeFailure {
			last, _ = json.Marshal(map[string]any{"toolName": tt.Name, "callId": tt.CallID, "error": tt.Error})
		}
		respond(&bus.ToolTerminalReply{V: bus.Version, Status: bus.StatusOK, LastToolError: last})
	case bus.HostCallUsage:
		var u bus.UsageReport
		_ = bus.Decode(m.Data, &u)
		g.mu.Lock()
		g.usage = append(g.usage, u)
		g.mu.Unlock()
		respond(bus.OK())
	default:
		g.mu.Lock()
		g.others = append(g.others, call)
		g.mu.Unlock()
		respond(bus.Rejected(fmt.Errorf("this gateway does not answer %s", call)))
	}
}

func (g *gateway) snapshot() ([]bus.ToolCall, []bus.ToolTerminal, []bus.UsageReport) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]bus.ToolCall(nil), g.calls...), append([]bus.ToolTerminal(nil), g.terminals...), append([]bus.UsageReport(nil), g.usage...)
}

// syncBuffer is a log sink tests read back.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// stateObjects are the names of the objects in TEAMSTER_NATIVE_STATE once
// it holds n (testenv.StateObjectsSettled).
func (f *fleet) stateObjects(n int) []string {
	f.t.Helper()
	return testenv.StateObjectsSettled(f.t, f.connect("inspect"), n)
}
