package compose

import (
	"bufio"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	gateway1  = "gateway-gateway-1"
	gateway2  = "gateway-gateway-2"
	delegate  = "delegate-voice-call@gateway-1"
	delegate2 = "delegate-voice-call@gateway-2"
	router1   = "router-router-1"
	worker1   = "worker-worker-1"
	worker2   = "worker-worker-2"
	operator  = "operator-operator"
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
			allow("teamster.submit.delegate.voice-call.gateway.gateway-1"),
			// Delegates get work admission and execution only, for the
			// gateway they are bound to.
			deny("teamster.submit.delegate.voice-call"),
			deny("teamster.submit.delegate.voice-call.gateway.gateway-2"),
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
			allow("_INBOX.delegate.gateway-1.voice-call.>"),
			deny("_INBOX.delegate.gateway-2.voice-call.>"),
			deny("_INBOX.delegate.>"),
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
			allow("$JS.API.CONSUMER.MSG.NEXT.TEAMSTER_ATTEMPTS.harness_claude-cli"),
			allow("$JS.ACK.TEAMSTER_ATTEMPTS.harness_codex.1.1.1.1700000000000000000.0"),
			allow("$JS.ACK.dom.hash.TEAMSTER_ATTEMPTS.harness_codex.1.1.1.1700000000000000000.0"),
			// Only the queues of the harnesses it hosts (codex, claude-cli):
			// no fetch, ack or term of another harness's attempts.
			deny("$JS.API.CONSUMER.MSG.NEXT.TEAMSTER_ATTEMPTS.harness_ghost"),
			deny("$JS.API.CONSUMER.INFO.TEAMSTER_ATTEMPTS.harness_ghost"),
			deny("$JS.ACK.TEAMSTER_ATTEMPTS.harness_ghost.1.1.1.1700000000000000000.0"),
			deny("$JS.ACK.dom.hash.TEAMSTER_ATTEMPTS.harness_ghost.1.1.1.1700000000000000000.0"),
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
			allow("teamster.worker.worker-1.run.a1.inject.gateway.gateway-1"),
			allow("teamster.worker.worker-1.control"),
			allowQueue("teamster.harness.codex.reset", bus.ConsumerName("codex")),
			denyQueue("teamster.harness.ghost.reset", bus.ConsumerName("ghost")),
			deny("teamster.harness.*.reset"),
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
			// Every request on its own identified subject.
			allow("teamster.submit.gateway.gateway-1"),
			allow("teamster.session.reset.gateway.gateway-1"),
			allow("teamster.session.create.gateway.gateway-1"),
			allow("teamster.inject.gateway.gateway-1"),
			allow("teamster.source.grant.gateway.gateway-1"),
			allow("teamster.source.revoke.gateway.gateway-1"),
			allow("teamster.run.x.cancel.gateway.gateway-1"),
			allow("teamster.run.x.inject.gateway.gateway-1"),
			allow("teamster.run.x.read.gateway.gateway-1"),
			// Its results and the fleet's harnesses, read by the routers.
			allow("teamster.get.result.gateway.gateway-1"),
			allow("teamster.get.harnesses.gateway.gateway-1"),
			deny("teamster.get.result"),
			deny("teamster.get.result.gateway.gateway-2"),
			// No JetStream API at all: its answers go to whatever reply
			// subject the request names, and a stream stores them there.
			deny("$JS.API.INFO"),
			deny("$JS.API.DIRECT.GET.TEAMSTER_RESULTS.teamster.result.gateway-1.a1"),
			deny("$JS.API.STREAM.INFO.KV_TEAMSTER_WORKERS"),
			deny("$JS.API.DIRECT.GET.KV_TEAMSTER_WORKERS.$KV.TEAMSTER_WORKERS.worker-1"),
			deny("$JS.API.DIRECT.GET.TEAMSTER_RESULTS.teamster.result.gateway-2.a1"),
			deny("$JS.API.DIRECT.GET.TEAMSTER_RESULTS.teamster.result.a1"),
			deny("$JS.API.DIRECT.GET.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.INFO.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.MSG.GET.TEAMSTER_RESULTS"),
			deny("$JS.API.STREAM.NAMES"),
			deny("$JS.API.STREAM.LIST"),
			// Only in its own name: not anonymously (the plain
			// subjects), not as another gateway, not as a delegate; not a
			// router, not a worker.
			deny("teamster.submit"),
			deny("teamster.inject"),
			deny("teamster.session.reset"),
			deny("teamster.source.grant"),
			deny("teamster.source.revoke"),
			deny("teamster.run.x.cancel"),
			deny("teamster.run.x.inject"),
			deny("teamster.run.x.read"),
			deny("teamster.inject.gateway.gateway-2"),
			deny("teamster.session.reset.gateway.gateway-2"),
			deny("teamster.source.grant.gateway.gateway-2"),
			deny("teamster.run.x.inject.gateway.gateway-2"),
			deny("teamster.submit.delegate.voice-call.gateway.gateway-1"),
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
			allow("teamster.worker.worker-1.run.a1.inject.gateway.gateway-1"),
			allow("teamster.worker.worker-1.run.a1.cancel.gateway.gateway-1"),
			allow("teamster.worker.worker-1.run.a1.read.gateway.gateway-1"),
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
			allowQueue("teamster.submit.delegate.*.gateway.*", bus.QueueRouters),
			allowQueue("teamster.inject.gateway.*", bus.QueueRouters),
			allowQueue("teamster.run.*.inject.gateway.*", bus.QueueRouters),
			allowQueue("teamster.run.*.cancel.gateway.*", bus.QueueRouters),
			allowQueue("teamster.run.*.read.gateway.*", bus.QueueRouters),
			allowQueue("teamster.session.*.gateway.*", bus.QueueRouters),
			allowQueue("teamster.source.grant.gateway.*", bus.QueueRouters),
			allowQueue("teamster.source.revoke.gateway.*", bus.QueueRouters),
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
		{gateway1, "publish", "$JS.API.STREAM.MSG.GET.>", `may publish "$JS.API.STREAM.MSG.GET.TEAMSTER_RESULTS"`},
		{gateway1, "publish", "$JS.API.DIRECT.GET.TEAMSTER_RESULTS.>", `may publish "$JS.API.DIRECT.GET.TEAMSTER_RESULTS.teamster.result.gateway-2.a1"`},
		{gateway1, "publish", "$JS.API.INFO", `may publish "$JS.API.INFO"`},
		{gateway1, "publish", "teamster.inject.gateway.*", `may publish "teamster.inject.gateway.gateway-2"`},
		{delegate, "subscribe", "_INBOX.delegate.>", `may subscribe "_INBOX.delegate.gateway-2.voice-call.>"`},
		{worker1, "subscribe", "teamster.worker.*.run.>", `may subscribe "teamster.worker.worker-2.run.a1.inject"`},
		{worker1, "publish", "$JS.API.CONSUMER.CREATE.>", `may publish "$JS.API.CONSUMER.CREATE.TEAMSTER_ATTEMPTS"`},
		{worker1, "publish", "$JS.API.CONSUMER.MSG.NEXT.TEAMSTER_ATTEMPTS.*", `may publish "$JS.API.CONSUMER.MSG.NEXT.TEAMSTER_ATTEMPTS.harness_ghost"`},
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
	for _, subj := range []string{bus.IdentifiedPattern(bus.SubjectSubmit), bus.IdentifiedPattern(bus.SubjectSubmitDelegates)} {
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
		{delegate, "teamster.submit.delegate.voice-call.gateway.gateway-1"},
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
