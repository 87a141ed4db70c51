package compose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/credentials"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// TestFleetUnderShippedPermissions runs the real router, two workers (with the
// shipped worker-1.json and worker-2.json), the gateway client, a delegate and
// the operator's reads, each logged in as its principal, and fails on any
// permissions violation: the permissions are enough for what the code does,
// not only tight. It runs with both JetStream ack subject formats.
func TestFleetUnderShippedPermissions(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ack_v2=%t", v2), func(t *testing.T) {
			s := startShipped(t, func(o *server.Options, _ *credentials.Layout) {
				o.FeatureFlags = map[string]bool{"js_ack_fc_v2": v2}
			})
			runFleet(t, s)
		})
	}
}

func runFleet(t *testing.T, s *shipped) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	sf := startFleet(ctx, t, s)
	rp, workers := sf.router, sf.workers

	// Gateway 2 listens everywhere it may, and must hear nothing of
	// gateway 1's attempts (checked at the end).
	spy := listenEverywhere(t, s, gateway2)

	// The gateway answers host callbacks for its hostId, gateway-1.
	gw := login(t, s, gateway1)
	if _, err := gw.nc.Subscribe("teamster.host.gateway-1.>", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"v":1,"status":"ok","result":{"answer":42}}`))
	}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(gw.nc, client.WithGateway("gateway-1"))
	if err != nil {
		t.Fatal(err)
	}

	// An ok turn with a host tool call and usage: events to the gateway's
	// inbox, the durable result, the host callback round trip.
	h := submit(ctx, t, c, attempt("fleet:ok", `{"script":[{"say":"hi `+secret+`"},{"tool":{"name":"lookup","args":{"q":"`+secret+`"}}},{"usage":3}]}`))
	res := waitResult(ctx, t, h)
	if res.Status != teamster.StatusOK || !strings.Contains(strings.Join(res.AssistantTexts, ""), "42") {
		t.Errorf("ok turn: %+v", res)
	}
	if _, err := c.Result(ctx, h.AttemptID()); err != nil {
		t.Errorf("the gateway cannot read the durable result: %v", err)
	}

	// A long turn, a second turn of the same session that the reaper ends
	// with queue_timeout (router publishes the result and the event), then
	// the gateway cancels the long turn on the worker running it.
	long := submit(ctx, t, c, attempt("fleet:long", `{"script":[{"sleep":30000}]}`))
	waitEvent(ctx, t, long, bus.EventClaimed)
	queued := attempt("fleet:long", "behind the long turn")
	queued.QueueTimeoutMs = 200
	if res := waitResult(ctx, t, submit(ctx, t, c, queued)); res.Error == nil || res.Error.Code != teamster.CodeQueueTimeout {
		t.Errorf("queued turn: %+v, want queue_timeout", res)
	}
	// Injection and source authority go through the routers; whether or not
	// a router serves those subjects yet, the bus must let them through.
	for plain, body := range map[string]string{
		bus.SubjectInject:      `{"v":1,"sessionKey":"fleet:long","text":"also this ` + secret + `","authorityKind":"run"}`,
		bus.SubjectSourceGrant: `{"v":1,"id":"src-1","generation":1}`,
	} {
		subj, err := bus.Identified(plain, "gateway-1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gw.nc.RequestWithContext(ctx, subj, []byte(body)); err != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("the gateway requests %s: %v", subj, err)
		}
	}
	if err := c.Cancel(ctx, long.AttemptID(), "test"); err != nil {
		t.Errorf("the gateway cannot cancel: %v", err)
	}
	if res := waitResult(ctx, t, long); res.Status != teamster.StatusCancelled {
		t.Errorf("cancelled turn: %+v", res)
	}

	// The owner creates a locked session pinned to codex; the delegate
	// continues it on its own subject with the exact stored facts, and its
	// events and result come back to its own inbox.
	locked := true
	voice := attempt("fleet:voice", "hello from the phone")
	voice.HostID = ""
	if err := c.SessionOp(ctx, bus.SessionCreate, bus.SessionOp{SessionKey: voice.SessionKey, SessionID: voice.SessionID,
		StorePath: voice.StorePath, AgentID: voice.AgentID, AgentHarnessID: "codex", ModelSelectionLocked: &locked}); err != nil {
		t.Errorf("the gateway creates a session: %v", err)
	}
	voice.AgentHarnessID, voice.AgentHarnessRuntimeOverride, voice.ModelSelectionLocked = "codex", "codex", true
	dp := login(t, s, delegate)
	dc, err := client.New(dp.nc, client.WithGateway("gateway-1"))
	if err != nil {
		t.Fatal(err)
	}
	dh, err := dc.SubmitAsDelegate(ctx, "voice-call", voice)
	switch {
	case err == nil:
		t.Cleanup(dh.Close)
		if res := waitResult(ctx, t, dh); res.Status != teamster.StatusOK {
			t.Errorf("delegate turn: %+v", res)
		}
	case teamster.CodeOf(err) != teamster.CodeInternal:
		t.Logf("delegate turn refused by the router (not a bus matter): %v", err)
	default:
		t.Errorf("delegate submit: %v", err)
	}
	// Owner-only operations: the reset asks a worker hosting the pinned
	// harness to clear its native state (router → teamster.harness.codex.reset).
	if err := c.SessionOp(ctx, bus.SessionReset, bus.SessionOp{SessionKey: voice.SessionKey, SessionID: "sid-2"}); err != nil {
		t.Errorf("the gateway resets a session: %v", err)
	}

	// The operator reads the registry and a result, and asks a worker for
	// its status.
	op := login(t, s, operator)
	ojs, err := jetstream.New(op.nc)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := bus.ReadRegistry(ctx, ojs)
	if err != nil || len(entries) != 2 {
		t.Errorf("the operator reads the registry: %d entries, %v", len(entries), err)
	}
	if _, err := bus.GetResult(ctx, ojs, teamster.Scope("gateway-1", h.AttemptID())); err != nil {
		t.Errorf("the operator reads a result: %v", err)
	}
	// teamster status: the harness consumers' queue depths.
	attempts, err := ojs.Stream(ctx, bus.StreamAttempts)
	if err != nil {
		t.Fatalf("the operator looks up %s: %v", bus.StreamAttempts, err)
	}
	consumers := attempts.ConsumerNames(ctx)
	for name := range consumers.Name() {
		if cons, err := attempts.Consumer(ctx, name); err != nil {
			t.Errorf("the operator reads consumer %s: %v", name, err)
		} else if _, err := cons.Info(ctx); err != nil {
			t.Errorf("the operator reads consumer %s: %v", name, err)
		}
	}
	if err := consumers.Err(); err != nil {
		t.Errorf("the operator lists the harness consumers: %v", err)
	}
	ctl, err := bus.Encode(&bus.WorkerControl{V: bus.Version, Op: bus.ControlStatus})
	if err != nil {
		t.Fatal(err)
	}
	m, err := op.nc.RequestWithContext(ctx, "teamster.worker.worker-1.control", ctl)
	if err != nil {
		t.Fatalf("the operator asks worker-1 for its status: %v", err)
	}
	var st bus.WorkerControlReply
	if err := bus.Decode(m.Data, &st); err != nil || st.Status != bus.StatusOK {
		t.Errorf("worker-1 status: %s, %v", m.Data, err)
	}

	// A gateway cannot have another gateway's host answer its attempts'
	// callbacks: the router refuses a hostId that is not the submitter's.
	g2, err := client.New(spy.p.nc, client.WithGateway("gateway-2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g2.Submit(ctx, attempt("fleet:forged", "call gateway-1's host")); teamster.CodeOf(err) != teamster.CodeInvalidRequest {
		t.Errorf("gateway-2 submits with gateway-1's hostId: %v, want invalid_request", err)
	}

	noViolations(t, append([]*principal{rp, gw, dp, op}, workers...)...)
	spy.heardNothingOf(t, secret)
}

// shippedFleet is a router and two workers (the shipped worker-1.json and
// worker-2.json) on a shipped NATS server, each logged in as its principal,
// and the Redis they share.
type shippedFleet struct {
	router   *principal
	workers  []*principal
	newRedis func() *redis.Client
}

// startFleet starts a shippedFleet, its router reaping every 100 ms (so that
// queue timeouts come quickly), and waits until the router sees both
// workers' harnesses. The workers drain when the test ends, with no
// permissions violation.
func startFleet(ctx context.Context, t *testing.T, s *shipped) *shippedFleet {
	t.Helper()
	newRedis := redisClients(t)
	log := logrus.New()
	log.SetOutput(io.Discard)

	// The router, reaping every 100ms so the queue_timeout below is quick.
	rp := login(t, s, router1)
	r, err := router.New(router.Params{NATS: rp.nc, Redis: newRedis(), Logger: log, ReaperInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatalf("the router does not start as principal router: %v", err)
	}
	t.Cleanup(r.Stop)

	// Two workers with the shipped configs, each with its own connection.
	var workers []*principal
	for _, file := range []string{"worker-1.json", "worker-2.json"} {
		cfg, err := worker.LoadConfig(file)
		if err != nil {
			t.Fatal(err)
		}
		wp := login(t, s, "worker-"+cfg.WorkerID)
		w, err := worker.New(worker.Params{Config: cfg, NATS: wp.nc, Redis: newRedis(), Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatalf("worker %s does not start as principal worker: %v", cfg.WorkerID, err)
		}
		t.Cleanup(func() {
			dctx, dcancel := context.WithTimeout(context.Background(), waitFor)
			defer dcancel()
			if err := w.Drain(dctx); err != nil {
				t.Errorf("drain %s: %v", w.ID(), err)
			}
			noViolations(t, wp) // the drain too: registry delete, unsubscribes
		})
		workers = append(workers, wp)
	}
	waitUntil(t, "the router sees both workers' harnesses", func() bool { return len(r.Manifests()) >= 4 })
	return &shippedFleet{router: rp, workers: workers, newRedis: newRedis}
}

// secret marks gateway-1's prompts, tool arguments and steering; no byte of
// it may reach gateway-2.
const secret = "gateway-1-only-5b0c9e"

// spy is a principal subscribed everywhere its permissions let it.
type spy struct {
	p    *principal
	mu   sync.Mutex
	seen [][]byte
}

// listenEverywhere logs in as user and subscribes to every subject its
// role may: its inbox and its host callbacks.
func listenEverywhere(t *testing.T, s *shipped, user string) *spy {
	t.Helper()
	sp := &spy{p: login(t, s, user)}
	p := principalOf(t, user)
	for _, subj := range []string{p.InboxPrefix() + ".>", "teamster.host." + p.Name + ".>"} {
		if _, err := sp.p.nc.Subscribe(subj, func(m *nats.Msg) {
			b := append([]byte(m.Subject+" "+m.Reply+" "), m.Data...)
			for k, vs := range m.Header {
				b = append(b, []byte(" "+k+"="+strings.Join(vs, ","))...)
			}
			sp.mu.Lock()
			sp.seen = append(sp.seen, b)
			sp.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	return sp
}

// heardNothingOf fails when any message the spy received holds marker, or
// when it received nothing at all (then it was not listening).
func (sp *spy) heardNothingOf(t *testing.T, marker string) {
	t.Helper()
	if err := sp.p.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.seen) == 0 {
		t.Errorf("%s heard nothing, not even the replies to its own requests", sp.p.user)
	}
	for _, b := range sp.seen {
		if strings.Contains(string(b), marker) {
			t.Errorf("%s heard another gateway's traffic: %q", sp.p.user, b)
		}
	}
	noViolations(t, sp.p)
}

// attempt is a prepared attempt that auto selection sends to the scripted
// codex harness of the shipped worker configs.
func attempt(session, prompt string) *bus.Attempt {
	return &bus.Attempt{
		V: bus.Version, AgentID: "main", SessionKey: session, SessionID: "sid-" + session, StorePath: "/var/openclaw/" + session,
		Provider: "openai", ModelID: "gpt-5.6-sol", HostID: "gateway-1",
		ModelProvider: &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}}, RequestTransportOverrides: "none"},
		Prompt:        prompt,
	}
}

func submit(ctx context.Context, t *testing.T, c *client.Client, a *bus.Attempt) *client.Handle {
	t.Helper()
	h, err := c.Submit(ctx, a)
	if err != nil {
		t.Fatalf("submit %s: %v", a.SessionKey, err)
	}
	if h.Reply.Status != bus.StatusAccepted {
		t.Fatalf("submit %s: %+v, want accepted", a.SessionKey, h.Reply)
	}
	t.Cleanup(h.Close)
	return h
}

func waitResult(ctx context.Context, t *testing.T, h *client.Handle) *bus.Result {
	t.Helper()
	r, err := h.Result(ctx)
	if err != nil {
		t.Fatalf("result of %s: %v", h.AttemptID(), err)
	}
	return r
}

func waitEvent(ctx context.Context, t *testing.T, h *client.Handle, typ string) {
	t.Helper()
	for {
		select {
		case e, ok := <-h.Events():
			if !ok {
				t.Fatalf("events of %s ended before a %s event", h.AttemptID(), typ)
			}
			if e.Type == typ {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %s event for %s", typ, h.AttemptID())
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkerStartsFirst: compose starts routers and workers together, so a
// worker may be first to reach NATS. It creates nothing (its principal may
// not): it waits, and starts once a router has set JetStream up and made its
// harnesses' consumers.
func TestWorkerStartsFirst(t *testing.T) {
	s := startShipped(t)
	newRedis := redisClients(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	cfg, err := worker.LoadConfig("worker-3.json")
	if err != nil {
		t.Fatal(err)
	}
	wp := login(t, s, "worker-"+cfg.WorkerID)
	w, err := worker.New(worker.Params{Config: cfg, NATS: wp.nc, Redis: newRedis(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- w.Start(ctx) }()
	select {
	case err := <-started:
		t.Fatalf("the worker started with no router (%v): it cannot have found its streams", err)
	case <-time.After(time.Second):
	}
	rp := login(t, s, router1)
	r, err := router.New(router.Params{NATS: rp.nc, Redis: newRedis(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if err := <-started; err != nil {
		t.Fatalf("a worker started before any router: %v", err)
	}
	if err := w.Drain(ctx); err != nil {
		t.Errorf("drain: %v", err)
	}
	noViolations(t, wp, rp)
}

// redisClients starts a redis-server for the test and returns a maker of
// clients of it, each closed when the test ends.
func redisClients(t *testing.T) func() *redis.Client {
	t.Helper()
	rd := testenv.NewRedis(t)
	return func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: rd.Addr()})
		t.Cleanup(func() { c.Close() })
		return c
	}
}
