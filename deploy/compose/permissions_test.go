package compose

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/credentials"
)

// rule is one expected permission of one principal.
type rule struct {
	subject string
	queue   string // subscribe only
	allowed bool
}

func allow(subject string) rule { return rule{subject: subject, allowed: true} }
func deny(subject string) rule  { return rule{subject: subject} }
func allowQueue(subject, queue string) rule {
	return rule{subject: subject, queue: queue, allowed: true}
}
func denyQueue(subject, queue string) rule { return rule{subject: subject, queue: queue} }

// The principals of the test deployment (testSpec), as <role>-<name>.
const (
	gateway1 = "gateway-gateway-1"
	gateway2 = "gateway-gateway-2"
	delegate = "delegate-voice-call"
	router1  = "router-router-1"
	worker1  = "worker-worker-1"
	worker2  = "worker-worker-2"
	operator = "operator-operator"
)

// principalRules is, per principal, what docs/PROTOCOL.md lets its role do
// and what it must not: every forbidden action of the security design (reading
// another principal's inbox deliveries, acking another gateway's attempt,
// answering another gateway's host callbacks, reading another worker's
// steering, creating a consumer as worker or operator) and the refusals
// that held before.
var principalRules = []struct {
	user      string
	publish   []rule
	subscribe []rule
}{
	{
		user: delegate,
		publish: []rule{
			allow("teamster.submit.delegate.voice-call"),
			// Delegates get work admission and execution only.
			deny("teamster.submit"),
			deny("teamster.submit.gateway.gateway-1"),
			deny("teamster.session.reset"),
			deny("teamster.session.create"),
			deny("teamster.attempt.codex"),
			deny("teamster.submit.delegate.other-plugin"),
			deny("teamster.inject"),
			deny("teamster.source.grant"),
			deny("teamster.run.x.cancel"),
			deny("teamster.run.x.inject"),
			deny("teamster.run.x.read"),
			deny("teamster.result.x"),
			deny("teamster.worker.worker-1.control"),
			deny("teamster.harness.codex.reset"),
			deny("_INBOX.forged"),
			deny("$JS.API.STREAM.INFO.TEAMSTER_RESULTS"),
			deny("$KV.TEAMSTER_WORKERS.worker-1"),
		},
		subscribe: []rule{
			allow("_INBOX.delegate.voice-call.>"),
			deny("_INBOX.>"),
			deny("_INBOX.gateway.gateway-1.>"),
			deny("teamster.submit"),
			deny("teamster.attempt.>"),
			deny("teamster.host.>"),
		},
	},
	{
		user: worker1,
		publish: []rule{
			allow("teamster.result.a1"),
			allow("teamster.host.gateway-1.a1.tool"),
			allow("_INBOX.gateway.gateway-1.events"),
			allow("$KV.TEAMSTER_WORKERS.worker-1"),
			allow("$JS.API.CONSUMER.INFO.TEAMSTER_ATTEMPTS.harness_codex"),
			allow("$JS.API.CONSUMER.MSG.NEXT.TEAMSTER_ATTEMPTS.harness_codex"),
			allow("$JS.API.DIRECT.GET.OBJ_TEAMSTER_NATIVE_STATE"),
			// A worker never submits, in anyone's name.
			deny("teamster.submit"),
			deny("teamster.submit.delegate.voice-call"),
			deny("teamster.submit.gateway.gateway-1"),
			deny("teamster.session.reset"),
			deny("teamster.inject"),
			deny("teamster.attempt.codex"),
			deny("teamster.run.x.cancel"),
			deny("teamster.worker.worker-2.control"),
			deny("teamster.worker.worker-2.run.a1.inject"),
			deny("teamster.harness.codex.reset"),
			deny("teamster.source.revoked"),
			// Only its own registry entry.
			deny("$KV.TEAMSTER_WORKERS.worker-2"),
			// No destructive or indirect-publish JetStream calls, and no
			// stream or consumer created or changed: routers own them.
			deny("$JS.API.STREAM.DELETE.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.STREAM.PURGE.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.STREAM.MSG.DELETE.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.CREATE.EVIL"),
			deny("$JS.API.STREAM.CREATE.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.STREAM.UPDATE.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.STREAM.UPDATE.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.UPDATE.KV_TEAMSTER_WORKERS"),
			deny("$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS.harness_codex.teamster.attempt.codex"),
			deny("$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.CONSUMER.DURABLE.CREATE.TEAMSTER_ATTEMPTS.harness_codex"),
			deny("$JS.API.CONSUMER.DELETE.TEAMSTER_ATTEMPTS.harness_codex"),
			deny("$JS.API.CONSUMER.CREATE.KV_TEAMSTER_WORKERS.evil.$KV.TEAMSTER_WORKERS.>"),
			deny("$JS.API.CONSUMER.CREATE.TEAMSTER_RESULTS.evil.teamster.result.>"),
			deny("$JS.API.CONSUMER.CREATE.OBJ_TEAMSTER_NATIVE_STATE.evil"),
		},
		subscribe: []rule{
			// Its runs' steering and cancels, relayed by the routers, and
			// its control subject: nothing of another worker's.
			allow("teamster.worker.worker-1.run.a1.inject"),
			allow("teamster.worker.worker-1.run.a1.cancel"),
			allow("teamster.worker.worker-1.run.a1.read"),
			allow("teamster.worker.worker-1.control"),
			allowQueue("teamster.harness.codex.reset", bus.ConsumerName("codex")),
			allow("teamster.source.revoked"),
			allow("_INBOX.worker.worker-1.>"),
			deny("teamster.worker.worker-2.run.a1.inject"),
			deny("teamster.worker.worker-2.run.a1.read"),
			deny("teamster.worker.*.run.*.inject"),
			deny("teamster.worker.>"),
			deny("teamster.run.a1.inject"),
			deny("teamster.run.*.*"),
			deny("_INBOX.>"),
			deny("_INBOX.worker.worker-2.>"),
			deny("_INBOX.gateway.gateway-1.>"),
			deny("teamster.submit"),
			deny("teamster.attempt.codex"),
			deny("teamster.host.>"),
		},
	},
	{
		user: gateway1,
		publish: []rule{
			allow("teamster.submit.gateway.gateway-1"),
			allow("teamster.session.reset"),
			allow("teamster.session.create"),
			allow("teamster.inject"),
			allow("teamster.source.grant"),
			allow("teamster.source.revoke"),
			allow("teamster.run.x.cancel"),
			allow("teamster.run.x.inject"),
			allow("teamster.run.x.read"),
			allow("$JS.API.STREAM.INFO.TEAMSTER_RESULTS"),
			allow("$JS.API.STREAM.MSG.GET.TEAMSTER_RESULTS"),
			allow("$JS.API.STREAM.INFO.KV_TEAMSTER_WORKERS"),
			allow("$JS.API.DIRECT.GET.KV_TEAMSTER_WORKERS.$KV.TEAMSTER_WORKERS.worker-1"),
			// Only in its own name: not anonymously, not as another
			// gateway, not as a delegate; not a router, not a worker.
			deny("teamster.submit"),
			deny("teamster.submit.gateway.gateway-2"),
			deny("teamster.submit.delegate.voice-call"),
			deny("teamster.attempt.codex"),
			deny("teamster.result.a1"),
			deny("teamster.worker.worker-1.control"),
			deny("teamster.worker.worker-1.run.a1.inject"),
			deny("teamster.harness.codex.reset"),
			deny("teamster.source.revoked"), // routers broadcast a revoke after recording it
			deny("_INBOX.forged"),           // only replies to requests it received
			deny("$KV.TEAMSTER_WORKERS.worker-1"),
			// It acks nothing: attempts are the workers'.
			deny("$JS.ACK.TEAMSTER_ATTEMPTS.harness_codex.1.1.1.1700000000000000000.0"),
			// It creates nothing on JetStream.
			deny("$JS.API.STREAM.CREATE.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.UPDATE.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.PURGE.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.INFO.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.CONSUMER.CREATE.TEAMSTER_RESULTS"),
			deny("$JS.API.CONSUMER.CREATE.KV_TEAMSTER_WORKERS.watch.$KV.TEAMSTER_WORKERS.>"),
		},
		subscribe: []rule{
			allow("_INBOX.gateway.gateway-1.>"),
			allow("teamster.host.gateway-1.>"),
			// No other principal's inbox: no JetStream delivery to a
			// worker (prompt and ack subject), no other gateway's events.
			deny("_INBOX.>"),
			deny("_INBOX.gateway.gateway-2.>"),
			deny("_INBOX.worker.worker-1.>"),
			deny("_INBOX.router.router-1.>"),
			// No other gateway's host callbacks.
			deny("teamster.host.>"),
			deny("teamster.host.gateway-2.>"),
			deny("teamster.host.*.a1.tool"),
			deny("teamster.submit"),
			deny("teamster.attempt.>"),
			deny("teamster.run.*.cancel"),
			deny("teamster.worker.>"),
		},
	},
	{
		user: router1,
		publish: []rule{
			allow("teamster.attempt.codex"),
			allow("teamster.result.a1"),
			allow("teamster.worker.worker-1.run.a1.inject"),
			allow("teamster.worker.worker-1.run.a1.cancel"),
			allow("teamster.worker.worker-1.run.a1.read"),
			allow("teamster.worker.worker-1.control"),
			allow("teamster.harness.codex.reset"),
			allow("teamster.source.revoked"),
			allow("_INBOX.gateway.gateway-1.events"),
			allow("$JS.API.STREAM.CREATE.TEAMSTER_ATTEMPTS"),
			allow("$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS.harness_codex.teamster.attempt.codex"),
			deny("teamster.submit"),
			deny("teamster.submit.delegate.voice-call"),
			deny("teamster.session.reset"),
			deny("teamster.run.a1.inject"),
			deny("teamster.host.gateway-1.a1.tool"),
		},
		subscribe: []rule{
			allowQueue("teamster.submit", bus.QueueRouters),
			allowQueue("teamster.submit.gateway.*", bus.QueueRouters),
			allowQueue("teamster.submit.delegate.*", bus.QueueRouters),
			allowQueue("teamster.submit.delegate.voice-call", bus.QueueRouters),
			allowQueue("teamster.inject", bus.QueueRouters),
			allowQueue("teamster.run.*.inject", bus.QueueRouters),
			allowQueue("teamster.run.*.cancel", bus.QueueRouters),
			allowQueue("teamster.run.*.read", bus.QueueRouters),
			allowQueue("teamster.session.*", bus.QueueRouters),
			allowQueue("teamster.source.grant", bus.QueueRouters),
			allowQueue("teamster.source.revoke", bus.QueueRouters),
			allow("_INBOX.router.router-1.>"),
			// Only in queue group routers.
			deny("teamster.submit"),
			denyQueue("teamster.submit", "eavesdroppers"),
			deny("teamster.run.*.inject"),
			deny("teamster.host.>"),
			deny("teamster.worker.>"),
			deny("_INBOX.>"),
			deny("_INBOX.gateway.gateway-1.>"),
		},
	},
	{
		user: operator,
		publish: []rule{
			allow("teamster.worker.worker-1.control"),
			allow("teamster.run.a1.cancel"),
			allow("$JS.API.INFO"),
			allow("$JS.API.STREAM.INFO.TEAMSTER_ATTEMPTS"),
			allow("$JS.API.CONSUMER.INFO.TEAMSTER_ATTEMPTS.harness_codex"),
			allow("$JS.API.DIRECT.GET.KV_TEAMSTER_WORKERS.$KV.TEAMSTER_WORKERS.worker-1"),
			deny("teamster.submit"),
			deny("teamster.run.a1.inject"),
			deny("teamster.run.a1.read"),
			deny("teamster.session.reset"),
			deny("teamster.attempt.codex"),
			deny("teamster.result.a1"),
			deny("$KV.TEAMSTER_WORKERS.worker-1"),
			// Read-only on JetStream: no stream or consumer changed.
			deny("$JS.API.STREAM.DELETE.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.STREAM.PURGE.TEAMSTER_ATTEMPTS"),
			deny("$JS.API.STREAM.UPDATE.TEAMSTER_RESULTS"),
			deny("$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS.evil.teamster.attempt.codex"),
			deny("$JS.API.CONSUMER.CREATE.KV_TEAMSTER_WORKERS.evil.$KV.TEAMSTER_WORKERS.>"),
			deny("$JS.API.CONSUMER.DELETE.TEAMSTER_ATTEMPTS.harness_codex"),
		},
		subscribe: []rule{
			allow("_INBOX.operator.operator.>"),
			deny("_INBOX.>"),
			deny("teamster.submit"),
			deny("teamster.attempt.>"),
			deny("teamster.worker.>"),
		},
	},
}

// TestPrincipalPermissions checks each principal of the shipped NATS
// configuration against principalRules.
func TestPrincipalPermissions(t *testing.T) {
	s := startShipped(t)
	for _, c := range principalRules {
		t.Run(c.user, func(t *testing.T) {
			for _, m := range mismatches(t, s, c.user, c.publish, c.subscribe) {
				t.Error(m)
			}
		})
	}
}

// TestALoosenedConfigFails shows that TestPrincipalPermissions can fail: each
// loosening of one principal's permissions, as a hand edit of the generated
// file would make it, is found by its rules.
func TestALoosenedConfigFails(t *testing.T) {
	for _, c := range []struct {
		user, verb, subject, want string
	}{
		{gateway1, "subscribe", "_INBOX.>", `may subscribe "_INBOX.>"`},
		{gateway1, "subscribe", "teamster.host.>", `may subscribe "teamster.host.gateway-2.>"`},
		{worker1, "subscribe", "teamster.worker.*.run.>", `may subscribe "teamster.worker.worker-2.run.a1.inject"`},
		{worker1, "publish", "$JS.API.CONSUMER.CREATE.>", `may publish "$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS"`},
		{operator, "publish", "$JS.API.CONSUMER.>", `may publish "$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS.evil.teamster.attempt.codex"`},
	} {
		t.Run(c.user+"+"+c.subject, func(t *testing.T) {
			s := startShipped(t, loosen(t, c.user, c.verb, c.subject))
			var found []string
			for _, r := range principalRules {
				if r.user == c.user {
					found = mismatches(t, s, c.user, r.publish, r.subscribe)
				}
			}
			for _, m := range found {
				if strings.Contains(m, c.want) {
					return
				}
			}
			t.Fatalf("with %s allowed to %s %q the rules found %q, want one naming %s", c.user, c.verb, c.subject, found, c.want)
		})
	}
}

// loosen adds an allow to a principal's permissions (and drops its denies
// of the same verb, which would otherwise still refuse).
func loosen(t *testing.T, user, verb, subject string) func(*server.Options, *credentials.Layout) {
	return func(o *server.Options, l *credentials.Layout) {
		pub := publicKey(t, l, principalOf(t, user))
		for _, u := range o.Nkeys {
			if u.Nkey != pub {
				continue
			}
			sp := u.Permissions.Subscribe
			if verb == "publish" {
				sp = u.Permissions.Publish
			}
			sp.Allow = append(sp.Allow, subject)
			sp.Deny = nil
			return
		}
		t.Fatalf("no user for %s", user)
	}
}

// TestGatewayAnswerWindow checks that a gateway may answer a host callback as
// late as an attempt's longest deadline: allow_responses: true would refuse
// an answer after 2 minutes, and a userInput callback may wait for a person.
func TestGatewayAnswerWindow(t *testing.T) {
	path, l := generated(t, nodeConfig)
	opts := loadNodeOptions(t, path)
	pub := publicKey(t, l, principalOf(t, gateway1))
	for _, u := range opts.Nkeys {
		if u.Nkey != pub {
			continue
		}
		if u.Permissions == nil || u.Permissions.Response == nil {
			t.Fatal("gateway: no allow_responses, so it cannot answer host callbacks")
		}
		r := u.Permissions.Response
		if want := time.Duration(bus.MaxTimeoutMs) * time.Millisecond; r.Expires < want || r.MaxMsgs != 1 {
			t.Errorf("gateway: allow_responses {max: %d, expires: %s}, want {max: 1, expires: >= %s}", r.MaxMsgs, r.Expires, want)
		}
		return
	}
	t.Fatal("no user for gateway-1")
}

// TestLogin checks that every principal logs in with its generated NKey and
// the deployment's CA, and that nothing else does: a key the configuration
// does not name, a password, a connection without TLS.
func TestLogin(t *testing.T) {
	s := startShipped(t)
	ps, err := testSpec().Principals()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		login(t, s, p.ID()) // fails the test when it cannot
	}
	stranger, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := stranger.Seed()
	strangerSeed := filepath.Join(t.TempDir(), "stranger.nk")
	if err := os.WriteFile(strangerSeed, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	nk, err := nats.NkeyOptionFromSeed(strangerSeed)
	if err != nil {
		t.Fatal(err)
	}
	ca := nats.RootCAs(s.creds.CA)
	for name, opts := range map[string][]nats.Option{
		"an unknown NKey":     {nk, ca},
		"a user and password": {nats.UserInfo("gateway", "dev-gateway-password-CHANGE-ME"), ca},
		"no credentials":      {ca},
	} {
		nc, err := nats.Connect(clientURL(s), append(opts, nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Errorf("%s logged in", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization error", name, err)
		}
	}
	// No plain-text client: the server's first line says TLS is required,
	// and a CONNECT in the clear gets no session.
	conn, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	info, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, `"tls_required":true`) {
		t.Errorf("the server's INFO does not require TLS: %s", info)
	}
	if _, err := conn.Write([]byte("CONNECT {}\r\nPING\r\n")); err == nil {
		if line, _ := bufio.NewReader(conn).ReadString('\n'); strings.HasPrefix(line, "PONG") {
			t.Error("a plain-text connection got a session")
		}
	}
}

// TestRequestReply runs the request/reply paths of the contract between
// principals: gateway → router on its submit subject (queue group routers),
// delegate → router on its own subject, worker → gateway host callback
// (answered through allow_responses, not a grant on _INBOX.>), operator →
// worker control, router → worker on a run's relayed subject. Each reply
// reaches the requester under its own inbox prefix.
func TestRequestReply(t *testing.T) {
	s := startShipped(t)
	router, gateway, delegate, worker, operator := login(t, s, router1), login(t, s, gateway1),
		login(t, s, delegate), login(t, s, worker1), login(t, s, operator)

	echo := func(m *nats.Msg) { _ = m.Respond(append([]byte("re:"), m.Data...)) }
	for _, subj := range []string{bus.SubjectSubmitGateways, bus.SubjectSubmitDelegates} {
		if _, err := router.nc.QueueSubscribe(subj, bus.QueueRouters, echo); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gateway.nc.Subscribe("teamster.host.gateway-1.>", echo); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"teamster.worker.worker-1.control", "teamster.worker.worker-1.run.a1.inject"} {
		if _, err := worker.nc.Subscribe(subj, echo); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*principal{router, gateway, worker} {
		if err := p.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		from    *principal
		subject string
	}{
		{gateway, "teamster.submit.gateway.gateway-1"},
		{delegate, "teamster.submit.delegate.voice-call"},
		{worker, "teamster.host.gateway-1.a1.tool"},
		{operator, "teamster.worker.worker-1.control"},
		{router, "teamster.worker.worker-1.run.a1.inject"},
	} {
		m, err := c.from.nc.Request(c.subject, []byte(c.from.user), 5*time.Second)
		if err != nil {
			t.Errorf("%s requests %s: %v", c.from.user, c.subject, err)
			continue
		}
		if got, want := string(m.Data), "re:"+c.from.user; got != want {
			t.Errorf("%s requests %s: reply %q, want %q", c.from.user, c.subject, got, want)
		}
		if prefix := principalOf(t, c.from.user).InboxPrefix() + "."; !strings.HasPrefix(m.Subject, prefix) {
			t.Errorf("%s: the reply came on %s, not under %s", c.from.user, m.Subject, prefix)
		}
	}
	noViolations(t, router, gateway, delegate, worker, operator)
}

// TestGatewayCannotChangeJetStream checks, through the JetStream API itself,
// that a gateway can read a durable result and the registry but create or
// delete nothing.
func TestGatewayCannotChangeJetStream(t *testing.T) {
	s := startShipped(t)
	router, gateway := login(t, s, router1), login(t, s, gateway1)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	rjs, err := jetstream.New(router.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := bus.Setup(ctx, rjs, bus.StreamOptions{}); err != nil {
		t.Fatalf("the router cannot set up JetStream: %v", err)
	}
	res := &bus.Result{V: bus.Version, AttemptID: "a1", Status: "ok", AssistantTexts: []string{"hi"}}
	if err := bus.PublishResult(ctx, rjs, res); err != nil {
		t.Fatal(err)
	}

	gjs, err := jetstream.New(gateway.nc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bus.GetResult(ctx, gjs, "a1")
	if err != nil {
		t.Fatalf("the gateway cannot read a durable result: %v", err)
	}
	if got.AttemptID != "a1" {
		t.Fatalf("the gateway read %+v", got)
	}
	if _, err := bus.ReadRegistry(ctx, gjs); err != nil {
		t.Fatalf("the gateway cannot read the registry: %v", err)
	}
	noViolations(t, gateway)

	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }
	c1, cancel1 := short()
	defer cancel1()
	if _, err := gjs.CreateStream(c1, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}}); err == nil {
		t.Error("the gateway created a stream")
	}
	c2, cancel2 := short()
	defer cancel2()
	if err := gjs.DeleteStream(c2, bus.StreamResults); err == nil {
		t.Error("the gateway deleted TEAMSTER_RESULTS")
	}
	c3, cancel3 := short()
	defer cancel3()
	if _, err := gjs.CreateOrUpdateConsumer(c3, bus.StreamResults, jetstream.ConsumerConfig{Durable: "evil"}); err == nil {
		t.Error("the gateway created a consumer")
	}
	if len(gateway.v.all()) == 0 {
		t.Error("the gateway's JetStream changes raised no permissions violation")
	}
	if _, err := rjs.Stream(ctx, "EVIL"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream EVIL: %v, want not found", err)
	}
	if _, err := rjs.Stream(ctx, bus.StreamResults); err != nil {
		t.Errorf("TEAMSTER_RESULTS: %v", err)
	}
}
