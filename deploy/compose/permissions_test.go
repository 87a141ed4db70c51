package compose

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/bus"
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

// TestPrincipalPermissions checks each principal of the shipped
// nats-accounts.conf against what docs/PROTOCOL.md lets its role do.
func TestPrincipalPermissions(t *testing.T) {
	s := startShipped(t)
	cases := []struct {
		user      string
		publish   []rule
		subscribe []rule
	}{
		{
			user: "delegate-voice-call",
			publish: []rule{
				allow("teamster.submit.delegate.voice-call"),
				// Delegates get work admission and execution only.
				deny("teamster.submit"),
				deny("teamster.session.reset"),
				deny("teamster.session.create"),
				deny("teamster.attempt.codex"),
				deny("teamster.submit.delegate.other-plugin"),
				deny("teamster.inject"),
				deny("teamster.source.grant"),
				deny("teamster.run.x.cancel"),
				deny("teamster.run.x.inject"),
				deny("teamster.result.x"),
				deny("teamster.worker.w1.control"),
				deny("teamster.harness.codex.reset"),
				deny("_INBOX.forged"),
				deny("$JS.API.STREAM.INFO.TEAMSTER_RESULTS"),
				deny("$KV.TEAMSTER_WORKERS.w1"),
			},
			subscribe: []rule{
				allow("_INBOX.>"),
				deny("teamster.submit"),
				deny("teamster.attempt.>"),
				deny("teamster.host.>"),
			},
		},
		{
			user: "worker",
			publish: []rule{
				allow("teamster.result.a1"),
				allow("teamster.host.gw1.a1.tool"),
				allow("_INBOX.events"),
				allow("$KV.TEAMSTER_WORKERS.w1"),
				allow("$JS.API.CONSUMER.MSG.NEXT.TEAMSTER_ATTEMPTS.harness_codex"),
				// A worker never submits, in anyone's name.
				deny("teamster.submit"),
				deny("teamster.submit.delegate.voice-call"),
				deny("teamster.session.reset"),
				deny("teamster.inject"),
				deny("teamster.attempt.codex"),
				deny("teamster.run.x.cancel"),
				deny("teamster.worker.w2.control"),
				deny("teamster.harness.codex.reset"),
				deny("teamster.source.revoked"),
				// No destructive or indirect-publish JetStream calls.
				deny("$JS.API.STREAM.DELETE.TEAMSTER_ATTEMPTS"),
				deny("$JS.API.STREAM.PURGE.TEAMSTER_ATTEMPTS"),
				deny("$JS.API.STREAM.MSG.DELETE.TEAMSTER_RESULTS"),
				deny("$JS.API.STREAM.CREATE.EVIL"),
				// Streams are created when missing, never updated: routers
				// own their configuration (an update could add a republish).
				deny("$JS.API.STREAM.UPDATE.TEAMSTER_ATTEMPTS"),
				deny("$JS.API.STREAM.UPDATE.TEAMSTER_RESULTS"),
				deny("$JS.API.STREAM.UPDATE.KV_TEAMSTER_WORKERS"),
				deny("$JS.API.CONSUMER.DELETE.TEAMSTER_ATTEMPTS.harness_codex"),
				deny("$JS.API.CONSUMER.CREATE.KV_TEAMSTER_WORKERS.evil.$KV.TEAMSTER_WORKERS.>"),
				deny("$JS.API.CONSUMER.CREATE.TEAMSTER_RESULTS.evil.teamster.result.>"),
			},
			subscribe: []rule{
				allow("teamster.run.a1.*"), // what a worker subscribes to, one per run
				allow("teamster.run.a1.inject"),
				allow("teamster.run.a1.cancel"),
				allow("teamster.worker.w1.control"),
				allowQueue("teamster.harness.codex.reset", bus.ConsumerName("codex")),
				allow("teamster.source.revoked"),
				allow("_INBOX.>"),
				deny("teamster.submit"),
				deny("teamster.attempt.codex"),
				deny("teamster.host.>"),
			},
		},
		{
			user: "gateway",
			publish: []rule{
				allow("teamster.submit"),
				allow("teamster.session.reset"),
				allow("teamster.session.create"),
				allow("teamster.inject"),
				allow("teamster.source.grant"),
				allow("teamster.source.revoke"),
				allow("teamster.run.x.cancel"),
				allow("teamster.run.x.inject"),
				allow("$JS.API.STREAM.INFO.TEAMSTER_RESULTS"),
				allow("$JS.API.STREAM.MSG.GET.TEAMSTER_RESULTS"),
				// Not a delegate, not a router, not a worker.
				deny("teamster.submit.delegate.voice-call"),
				deny("teamster.attempt.codex"),
				deny("teamster.result.a1"),
				deny("teamster.worker.w1.control"),
				deny("teamster.harness.codex.reset"),
				deny("teamster.source.revoked"), // routers broadcast a revoke after recording it
				deny("_INBOX.forged"),           // only replies to requests it received
				deny("$KV.TEAMSTER_WORKERS.w1"),
				// It creates nothing on JetStream.
				deny("$JS.API.STREAM.CREATE.TEAMSTER_RESULTS"),
				deny("$JS.API.STREAM.UPDATE.TEAMSTER_RESULTS"),
				deny("$JS.API.STREAM.PURGE.TEAMSTER_RESULTS"),
				deny("$JS.API.STREAM.INFO.TEAMSTER_ATTEMPTS"),
				deny("$JS.API.CONSUMER.CREATE.TEAMSTER_RESULTS"),
			},
			subscribe: []rule{
				allow("_INBOX.>"),
				allow("teamster.host.gw1.>"),
				deny("teamster.submit"),
				deny("teamster.attempt.>"),
				deny("teamster.run.*.cancel"),
			},
		},
		{
			user: "router",
			publish: []rule{
				allow("teamster.attempt.codex"),
				allow("teamster.result.a1"),
				allow("teamster.run.a1.inject"),
				allow("teamster.run.a1.cancel"),
				allow("teamster.worker.w1.control"),
				allow("teamster.harness.codex.reset"),
				allow("teamster.source.revoked"),
				allow("_INBOX.events"),
				allow("$JS.API.STREAM.CREATE.TEAMSTER_ATTEMPTS"),
				deny("teamster.submit"),
				deny("teamster.submit.delegate.voice-call"),
				deny("teamster.session.reset"),
				deny("teamster.host.gw1.a1.tool"),
			},
			subscribe: []rule{
				allowQueue("teamster.submit", bus.QueueRouters),
				allowQueue("teamster.submit.delegate.*", bus.QueueRouters),
				allowQueue("teamster.submit.delegate.voice-call", bus.QueueRouters),
				allowQueue("teamster.inject", bus.QueueRouters),
				allowQueue("teamster.session.*", bus.QueueRouters),
				allowQueue("teamster.source.grant", bus.QueueRouters),
				allowQueue("teamster.source.revoke", bus.QueueRouters),
				allow("_INBOX.>"),
				// Only in queue group routers.
				deny("teamster.submit"),
				denyQueue("teamster.submit", "eavesdroppers"),
				deny("teamster.host.>"),
			},
		},
		{
			user: "operator",
			publish: []rule{
				allow("teamster.worker.w1.control"),
				allow("teamster.run.a1.cancel"),
				allow("$JS.API.INFO"),
				allow("$JS.API.STREAM.INFO.TEAMSTER_ATTEMPTS"),
				allow("$JS.API.CONSUMER.INFO.TEAMSTER_ATTEMPTS.harness_codex"),
				deny("teamster.submit"),
				deny("teamster.attempt.codex"),
				deny("teamster.result.a1"),
				deny("$KV.TEAMSTER_WORKERS.w1"),
				deny("$JS.API.STREAM.DELETE.TEAMSTER_ATTEMPTS"),
				deny("$JS.API.STREAM.PURGE.TEAMSTER_ATTEMPTS"),
				deny("$JS.API.STREAM.UPDATE.TEAMSTER_RESULTS"),
				deny("$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS.evil.teamster.attempt.codex"),
				deny("$JS.API.CONSUMER.DELETE.TEAMSTER_ATTEMPTS.harness_codex"),
			},
			subscribe: []rule{
				allow("_INBOX.>"),
				deny("teamster.submit"),
				deny("teamster.attempt.>"),
			},
		},
	}
	for _, c := range cases {
		t.Run(c.user, func(t *testing.T) {
			for _, r := range c.publish {
				canPublish(t, s, c.user, r.subject, r.allowed)
			}
			for _, r := range c.subscribe {
				canSubscribe(t, s, c.user, r.subject, r.queue, r.allowed)
			}
		})
	}
}

// TestGatewayAnswerWindow checks that a gateway may answer a host callback as
// late as an attempt's longest deadline: allow_responses: true would refuse
// an answer after 2 minutes, and a userInput callback may wait for a person.
func TestGatewayAnswerWindow(t *testing.T) {
	opts := loadNodeOptions(t, nodeConfig)
	for _, u := range opts.Users {
		if u.Username != "gateway" {
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
	t.Fatal("no user gateway")
}

// TestLogin checks that only the configured passwords log in.
func TestLogin(t *testing.T) {
	s := startShipped(t)
	for user := range passwords {
		login(t, s, user) // fails the test when it cannot
	}
	for _, c := range []struct{ user, password string }{
		{"gateway", "wrong"},
		{"nobody", "dev-gateway-password-CHANGE-ME"},
		{"", ""},
	} {
		nc, err := nats.Connect(clientURL(s), nats.UserInfo(c.user, c.password), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Errorf("user %q with password %q logged in", c.user, c.password)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("user %q: %v, want an authorization error", c.user, err)
		}
	}
}

// TestRequestReply runs the request/reply paths of the contract between
// principals: gateway → router on teamster.submit (queue group routers),
// delegate → router on its own subject, worker → gateway host callback
// (answered through allow_responses, not a grant on _INBOX.>), operator →
// worker control.
func TestRequestReply(t *testing.T) {
	s := startShipped(t)
	router, gateway, delegate, worker, operator := login(t, s, "router"), login(t, s, "gateway"),
		login(t, s, "delegate-voice-call"), login(t, s, "worker"), login(t, s, "operator")

	echo := func(m *nats.Msg) { _ = m.Respond(append([]byte("re:"), m.Data...)) }
	for _, subj := range []string{bus.SubjectSubmit, bus.SubjectSubmitDelegates} {
		if _, err := router.nc.QueueSubscribe(subj, bus.QueueRouters, echo); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gateway.nc.Subscribe("teamster.host.gw1.>", echo); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.nc.Subscribe("teamster.worker.worker-1.control", echo); err != nil {
		t.Fatal(err)
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
		{gateway, "teamster.submit"},
		{delegate, "teamster.submit.delegate.voice-call"},
		{worker, "teamster.host.gw1.a1.tool"},
		{operator, "teamster.worker.worker-1.control"},
	} {
		m, err := c.from.nc.Request(c.subject, []byte(c.from.user), 5*time.Second)
		if err != nil {
			t.Errorf("%s requests %s: %v", c.from.user, c.subject, err)
			continue
		}
		if got, want := string(m.Data), "re:"+c.from.user; got != want {
			t.Errorf("%s requests %s: reply %q, want %q", c.from.user, c.subject, got, want)
		}
	}
	noViolations(t, router, gateway, delegate, worker, operator)
}

// TestGatewayCannotChangeJetStream checks, through the JetStream API itself,
// that a gateway can read a durable result but create or delete nothing.
func TestGatewayCannotChangeJetStream(t *testing.T) {
	s := startShipped(t)
	router, gateway := login(t, s, "router"), login(t, s, "gateway")
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
