package compose

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/leases"
)

// secretA marks what only gateway-1 (tenant A) may ever see.
const secretA = "tenant-a-only-91d2c7"

// markB marks what gateway-2 (tenant B) sends; none of it may reach A's
// turns.
const markB = "tenant-b-was-here-44e0"

// TestTenantIsolation runs the real router and two workers under the shipped
// permissions, with tenant A (gateway-1) running turns, and tries, as tenant
// B (gateway-2, and the voice-call delegate bound to it), every request the
// protocol lets a gateway send and every JetStream read its credentials
// might reach: on A's session key, A's attempt ids and A's source id, with
// reply subjects and replyTo pointed at A's inbox and at fleet subjects.
// Each is refused, or acts on B's own namespace only (and then answers as it
// would for a name nobody uses); A's turns all get their own results, A's
// session record, source and stored results are unchanged, and B hears no
// byte of A's traffic.
func TestTenantIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	s := startShipped(t)
	sf := startFleet(ctx, t, s)
	rp, rdb := sf.router, sf.newRedis()

	// Tenant A: its client, its host (tool calls answered with its secret),
	// and a listener on a subject of its inbox that B aims replies at.
	a := login(t, s, gateway1)
	ca, err := client.New(a.nc, client.WithGateway("gateway-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.nc.Subscribe("teamster.host.gateway-1.>", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"v":1,"status":"ok","result":{"answer":"` + secretA + `"}}`))
	}); err != nil {
		t.Fatal(err)
	}
	aimedAtA := make(chan *nats.Msg, 64)
	if _, err := a.nc.ChanSubscribe("_INBOX.gateway.gateway-1.aimed", aimedAtA); err != nil {
		t.Fatal(err)
	}
	// Tenant B listens everywhere it may, and attacks from that
	// connection.
	spyB := listenEverywhere(t, s, gateway2)
	b := spyB.p
	cb, err := client.New(b.nc, client.WithGateway("gateway-2"))
	if err != nil {
		t.Fatal(err)
	}

	// A's state: a granted source, a finished turn with a tool call, and a
	// running turn that takes every input injected into it.
	const session, source = "victim", "src-a"
	if err := ca.GrantSource(ctx, source, 5); err != nil {
		t.Fatal(err)
	}
	a1 := tenantAttempt(session, `{"script":[{"say":"`+secretA+`"},{"tool":{"name":"lookup","args":{"q":"`+secretA+`"}}}]}`)
	t1 := submit(ctx, t, ca, a1)
	if res := waitResult(ctx, t, t1); res.Status != teamster.StatusOK {
		t.Fatalf("A's first turn: %+v", res)
	}
	resultA1, err := bus.GetResultBody(ctx, jsOf(t, rp.nc), teamster.Scope("gateway-1", t1.AttemptID()))
	if err != nil {
		t.Fatal(err)
	}
	t2 := submit(ctx, t, ca, tenantAttempt(session, `{"script":[{"say":"`+secretA+`"},{"awaitInjection":60000}]}`))
	waitEvent(ctx, t, t2, bus.EventClaimed)
	sessionKeyA := "teamster:{" + leases.Tag(teamster.Scope("gateway-1", session)) + "}:session"
	sourceKeyA := "teamster:source:{" + teamster.Scope("gateway-1", source) + "}"
	recordA := hgetall(ctx, t, rdb, sessionKeyA)
	sourceA := hgetall(ctx, t, rdb, sourceKeyA)
	if len(recordA) == 0 || len(sourceA) == 0 {
		t.Fatalf("A's session record %v or source %v is missing", recordA, sourceA)
	}

	// 1. Reading results: by sequence, by A's subject, by listing the
	// stream's subjects, by consumers. Every one is refused by NATS (no
	// answer); B's own read of A's attempt id finds nothing of A's.
	for subj, body := range map[string]string{
		"$JS.API.STREAM.MSG.GET." + bus.StreamResults:                                              `{"seq":1}`,
		"$JS.API.STREAM.MSG.GET." + bus.StreamResults + " ":                                        `{"last_by_subj":"teamster.result.gateway-1.` + t1.AttemptID() + `"}`,
		"$JS.API.DIRECT.GET." + bus.StreamResults:                                                  `{"seq":1}`,
		"$JS.API.DIRECT.GET." + bus.StreamResults + ".teamster.result.gateway-1." + t1.AttemptID(): ``,
		"$JS.API.DIRECT.GET." + bus.StreamResults + ".teamster.result.>":                           ``,
		"$JS.API.STREAM.INFO." + bus.StreamResults:                                                 `{"subjects_filter":">"}`,
		"$JS.API.STREAM.NAMES":                                                                     `{}`,
		"$JS.API.STREAM.LIST":                                                                      `{}`,
		"$JS.API.CONSUMER.LIST." + bus.StreamResults:                                               `{}`,
		"$JS.API.CONSUMER.CREATE." + bus.StreamResults:                                             `{"stream_name":"TEAMSTER_RESULTS","config":{"deliver_subject":"_INBOX.gateway.gateway-2.x"}}`,
		"$JS.API.CONSUMER.MSG.NEXT." + bus.StreamAttempts + ".harness_codex":                       `{"batch":1}`,
	} {
		subj = strings.TrimSpace(subj)
		before := len(b.v.all())
		if m, err := b.nc.Request(subj, []byte(body), 300*time.Millisecond); err == nil {
			t.Errorf("B's %s %s was answered: %s", subj, body, m.Data)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(b.v.all()) == before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if len(b.v.all()) == before {
			t.Errorf("B's %s raised no permissions violation", subj)
		}
	}
	// Any JetStream call with a reply subject a stream captures would have
	// the server store its answer there (A's result, the registry): B has
	// no JetStream call at all.
	for _, reply := range []string{"teamster.result.gateway-1." + t2.AttemptID(), "$KV.TEAMSTER_WORKERS.worker-1", "$KV.TEAMSTER_ROUTERS.router-1"} {
		before := len(b.v.all())
		for _, subj := range []string{"$JS.API.INFO", "$JS.API.DIRECT.GET." + bus.StreamResults + ".teamster.result.gateway-2." + t1.AttemptID()} {
			if err := b.nc.PublishRequest(subj, reply, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// The errors arrive before the flush's PONG, and reach the error
		// handler asynchronously.
		deadline := time.Now().Add(5 * time.Second)
		for len(b.v.all()) < before+2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if len(b.v.all()) < before+2 {
			t.Errorf("B's JetStream calls replying on %s raised no permissions violation", reply)
		}
	}
	if _, err := cb.Result(ctx, t1.AttemptID()); !errors.Is(err, client.ErrNoResult) {
		t.Errorf("B reads A's attempt id as its own: %v, want no result", err)
	}

	// 2. Steering, cancelling and reading A's running turn, by A's session
	// key and A's attempt id: the answers are those for names nobody uses.
	const otherSession, otherAttempt = "nobody-uses-this-session", "01NOBODYUSESTHISATTEMPT000"
	unknown := func(f func(session, attempt string) error) string {
		return errString(f(otherSession, otherAttempt))
	}
	probes := map[string]func(session, attempt string) error{
		"inject by session key": func(sk, _ string) error {
			_, err := cb.Inject(ctx, bus.InjectRequest{SessionKey: sk, Text: markB})
			return err
		},
		"inject by attempt id": func(_, id string) error {
			_, err := cb.Inject(ctx, bus.InjectRequest{AttemptID: id, Text: markB})
			return err
		},
		"source-bound inject": func(sk, _ string) error {
			_, err := cb.Inject(ctx, bus.InjectRequest{SessionKey: sk, Text: markB, AuthorityKind: bus.AuthoritySourceBound,
				Source: &bus.SourceRef{ID: source, Generation: 5}})
			return err
		},
		"cancel":   func(_, id string) error { return cb.Cancel(ctx, id, markB) },
		"run read": func(_, id string) error { _, err := cb.ReadRunFile(ctx, id, "token", "a.txt", 1<<20); return err },
		"patch": func(sk, _ string) error {
			return cb.SessionOp(ctx, bus.SessionPatch, bus.SessionOp{SessionKey: sk, AgentID: markB})
		},
		"archive": func(sk, _ string) error { return cb.SessionOp(ctx, bus.SessionArchive, bus.SessionOp{SessionKey: sk}) },
		"reset": func(sk, _ string) error {
			return cb.SessionOp(ctx, bus.SessionReset, bus.SessionOp{SessionKey: sk, SessionID: markB})
		},
		"delete": func(sk, _ string) error { return cb.SessionOp(ctx, bus.SessionDelete, bus.SessionOp{SessionKey: sk}) },
	}
	for name, f := range probes {
		want := unknown(f)
		got := strings.NewReplacer(session, otherSession, t2.AttemptID(), otherAttempt).Replace(errString(f(session, t2.AttemptID())))
		if got != want {
			t.Errorf("B's %s on A's session answers %q; on a name nobody uses %q", name, got, want)
		}
	}

	// 3. Sources: B grants A's source id at the highest generation and
	// revokes it; that is B's source, and A's is untouched.
	if err := cb.GrantSource(ctx, source, bus.MaxGeneration); err != nil {
		t.Errorf("B grants its own source %s: %v", source, err)
	}
	if err := cb.RevokeSource(ctx, source); err != nil {
		t.Errorf("B revokes its own source %s: %v", source, err)
	}

	// 4. Submits into A's session key and under A's attempt id are B's own:
	// accepted (no "already used"), run beside A's running turn (another
	// session), and never touch A's record or stored result.
	sub := tenantAttempt(session, `{"script":[{"say":"`+markB+`"}]}`)
	sub.AttemptID, sub.HostID = t1.AttemptID(), "gateway-2"
	if res := waitResult(ctx, t, submit(ctx, t, cb, sub)); res.Status != teamster.StatusOK || strings.Contains(strings.Join(res.AssistantTexts, ""), secretA) {
		t.Errorf("B's turn in its own session %q: %+v", session, res)
	}
	// A delegate bound to B cannot call A's host, nor continue A's session.
	d2 := login(t, s, delegate2)
	cd2, err := client.New(d2.nc, client.WithGateway("gateway-2"))
	if err != nil {
		t.Fatal(err)
	}
	forged := tenantAttempt(session, "call A's tools")
	forged.AgentHarnessID, forged.AgentHarnessRuntimeOverride, forged.ModelSelectionLocked = "codex", "codex", true
	forged.HostID = "gateway-1"
	if _, err := cd2.SubmitAsDelegate(ctx, "voice-call", forged); teamster.CodeOf(err) != teamster.CodeInvalidRequest {
		t.Errorf("B's delegate names A's hostId: %v, want invalid_request", err)
	}
	forged.HostID = ""
	if _, err := cd2.SubmitAsDelegate(ctx, "voice-call", forged); teamster.CodeOf(err) != teamster.CodeDelegationDenied {
		t.Errorf("B's delegate continues A's locked session: %v, want delegation_denied", err)
	}

	// 5. Replies aimed elsewhere: at A's inbox, at A's result subject, at
	// fleet subjects. The routers answer none of them and act on none;
	// replyTo at them is refused.
	targets := []string{"_INBOX.gateway.gateway-1.aimed", "teamster.result.gateway-1." + t2.AttemptID(),
		"teamster.attempt.codex", "$KV.TEAMSTER_ROUTERS.evil", "teamster.worker.worker-1.control"}
	const dropped = "dropped-by-the-router"
	for _, plain := range []string{bus.SubjectSubmit, bus.SubjectInject, "teamster.session.reset", bus.SubjectSourceGrant,
		bus.SubjectSourceRevoke, "teamster.run." + t2.AttemptID() + ".cancel", "teamster.run." + t2.AttemptID() + ".inject"} {
		subj, _ := bus.Identified(plain, "gateway-2")
		for _, reply := range targets {
			body := `{"v":1,"sessionKey":"` + dropped + `","sessionId":"x","agentId":"main","provider":"openai","modelId":"m","prompt":"` + markB + `","id":"` + source + `","generation":1,"text":"` + markB + `","authorityKind":"run"}`
			if err := b.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Data: []byte(body)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, replyTo := range targets {
		at := tenantAttempt("b-session", markB)
		at.HostID, at.ReplyTo = "gateway-2", replyTo
		if _, err := cb.Submit(ctx, at); teamster.CodeOf(err) != teamster.CodeInvalidRequest {
			t.Errorf("B's submit with replyTo %s: %v, want invalid_request", replyTo, err)
		}
	}
	// A dropped request changed nothing: not even B's own session has a key.
	if keys, err := rdb.Keys(ctx, "teamster:{"+leases.Tag(teamster.Scope("gateway-2", dropped))+"}:*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("requests the routers dropped left keys %v (%v)", keys, err)
	}
	// Nor can B publish there itself.
	for _, subj := range targets {
		_ = b.nc.Publish(subj, []byte(markB))
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// A's running turn ends with what A gave it and nothing of B's; A's own
	// steering still reaches it.
	if rep, err := ca.Inject(ctx, bus.InjectRequest{SessionKey: session, Text: "A steers"}); err != nil || rep.Status != bus.StatusAccepted {
		t.Errorf("A steers its own turn: %+v, %v", rep, err)
	}
	res2 := waitResult(ctx, t, t2)
	text2 := strings.Join(res2.AssistantTexts, "")
	if res2.Status != teamster.StatusOK || !strings.Contains(text2, secretA) || !strings.Contains(text2, "A steers") || strings.Contains(text2, markB) {
		t.Errorf("A's running turn: %+v", res2)
	}
	// Its durable result is the worker's, under A's subject.
	if stored, err := ca.Result(ctx, t2.AttemptID()); err != nil || stored.WorkerID == "" || stored.Status != teamster.StatusOK {
		t.Errorf("A's stored result of its running turn: %+v, %v", stored, err)
	}
	if got, err := bus.GetResultBody(ctx, jsOf(t, rp.nc), teamster.Scope("gateway-1", t1.AttemptID())); err != nil || string(got) != string(resultA1) {
		t.Errorf("A's stored result changed: %s (%v), was %s", got, err, resultA1)
	}
	// A resubmit of A's finished first turn is answered from its record
	// and runs nothing (never replayed). Then two turns of A's session,
	// submitted together, run one at a time and in order, continuing A's
	// thread (no reset, delete or patch of B's reached A's record): each
	// turn reads the binding the one before wrote under the session's
	// lease, so their bindings count turns 3 and 4.
	again := *a1
	again.AttemptID = t1.AttemptID()
	submit(ctx, t, ca, &again) // fails the test unless accepted
	t3 := submit(ctx, t, ca, tenantAttempt(session, "third"))
	t4 := submit(ctx, t, ca, tenantAttempt(session, "fourth"))
	for i, h := range []*client.Handle{t3, t4} {
		res := waitResult(ctx, t, h)
		var binding struct{ Turns int }
		if err := json.Unmarshal(res.NativeSession, &binding); err != nil || binding.Turns != 3+i || res.Status != teamster.StatusOK {
			t.Errorf("A's turn %d: %+v (binding %s), want turn %d of A's thread", 3+i, res, res.NativeSession, 3+i)
		}
	}
	if got, err := bus.GetResultBody(ctx, jsOf(t, rp.nc), teamster.Scope("gateway-1", t1.AttemptID())); err != nil || string(got) != string(resultA1) {
		t.Errorf("A's resubmitted turn's stored result changed: %s (%v), was %s", got, err, resultA1)
	}
	now := hgetall(ctx, t, rdb, sessionKeyA)
	for _, f := range []string{"sessionKey", "sessionId", "storePath", "agentId", "modelSelectionLocked", "agentHarnessId", "archived"} {
		if now[f] != recordA[f] {
			t.Errorf("A's session record field %s is %q, was %q", f, now[f], recordA[f])
		}
	}
	if got := hgetall(ctx, t, rdb, sourceKeyA); !maps.Equal(got, sourceA) {
		t.Errorf("A's source is %v, was %v", got, sourceA)
	}
	if err := ca.GrantSource(ctx, source, 6); err != nil {
		t.Errorf("A grants its source's next generation: %v", err)
	}
	if hs, err := ca.Harnesses(ctx); err != nil || len(hs) < 2 {
		t.Errorf("A reads the fleet's harnesses: %d, %v", len(hs), err)
	}
	select {
	case m := <-aimedAtA:
		t.Errorf("the fleet published on A's inbox for B: %s %q", m.Subject, m.Data)
	default:
	}
	noViolations(t, a, rp, d2)
	// B heard nothing of A's (B's own permission errors above are
	// expected: they are the refusals).
	spyB.mu.Lock()
	defer spyB.mu.Unlock()
	if len(spyB.seen) == 0 {
		t.Error("B heard nothing, not even the replies to its own requests")
	}
	for _, m := range spyB.seen {
		if strings.Contains(string(m), secretA) {
			t.Errorf("B heard A's traffic: %q", m)
		}
	}
}

func jsOf(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// tenantAttempt is attempt with its hostId left to the submitter's client.
func tenantAttempt(session, prompt string) *bus.Attempt {
	at := attempt(session, prompt)
	at.HostID = ""
	return at
}

func hgetall(ctx context.Context, t *testing.T, rdb *redis.Client, key string) map[string]string {
	t.Helper()
	m, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
