package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
)

// Beyond the catalogue: forged fields, big bodies, huge generations, reused ids.

// Fields that look like fleet state, in an otherwise valid submit on the
// owner's subject, with a forged Teamster-Delegate header: the attempt is
// accepted as the owner's; the fence, worker and state come from the fleet,
// and nothing forged reaches Redis or the result.
func TestHostileForgedFieldsAreIgnored(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	nc := f.Connect("forger")
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	const session = "hostile:forged"
	body := fmt.Sprintf(`{"v":1,"agentId":"main","sessionKey":%q,"sessionId":"sid-forged","provider":"openai","modelId":"gpt-5.6-sol",`+
		`"modelProvider":{"runtimePolicy":{"compatibleIds":["codex"]}},"prompt":"forged turn","replyTo":%q,`+
		`"fence":"x:999","workerId":"evil-worker","worker":"evil-worker","state":"finished","outcome":"ok","published":"1",`+
		`"seq":99,"seqmax":1,"claimed":{"fence":"x:999"},"harnessId":"claude-cli","status":"ok","by":"worker","result":{"status":"ok"}}`, session, inbox)
	msg, err := nc.RequestMsg(&nats.Msg{Subject: bus.SubjectSubmit, Data: []byte(body),
		Header: nats.Header{bus.HeaderDelegate: []string{"voice-call"}}}, hostileRequestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var rep bus.SubmitReply
	if err := bus.Decode(msg.Data, &rep); err != nil || rep.Status != bus.StatusAccepted || rep.HarnessID != "codex" {
		t.Fatalf("submit with forged fields: %+v %v, want accepted on codex", rep, err)
	}
	var claimed bus.ClaimedData
	var res *bus.Result
	for res == nil {
		m, err := sub.NextMsg(waitTimeout)
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		var e bus.Event
		if err := bus.Decode(m.Data, &e); err != nil {
			t.Fatalf("event: %v", err)
		}
		switch e.Type {
		case bus.EventClaimed:
			mustJSON(t, e.Data, &claimed)
		case bus.EventResult:
			res = &bus.Result{}
			if err := bus.Decode(e.Data, res); err != nil {
				t.Fatal(err)
			}
		}
	}
	epoch, n, ok := strings.Cut(claimed.Fence, ":")
	if !ok || len(epoch) != 16 || n != "1" || claimed.WorkerID != "w1" || claimed.HarnessID != "codex" {
		t.Fatalf("claimed %+v: want w1 on codex with the session's first fence <epoch>:1", claimed)
	}
	if res.Status != teamster.StatusOK || res.Fence != claimed.Fence || res.WorkerID != "w1" {
		t.Fatalf("result %+v, want ok under the claimed fence %s", res, claimed.Fence)
	}
	store := leases.NewStore(f.RDB)
	rec, err := store.Attempt(t.Context(), session, rep.AttemptID)
	if err != nil || rec.Fence != claimed.Fence || rec.WorkerID != "w1" {
		t.Fatalf("attempt record %+v (%v)", rec, err)
	}
	keys, _ := f.RDB.Keys(t.Context(), "*").Result()
	for _, k := range keys {
		v, _, err := redisValue(t.Context(), f.RDB, k)
		if err == nil && (strings.Contains(v, "x:999") || strings.Contains(v, "evil-worker")) {
			t.Errorf("a forged value reached Redis: %s = %s", k, v)
		}
	}
	// The forged header did not make it a delegate's turn: the owner's turn
	// wrote the whole session record.
	sr, err := store.Session(t.Context(), session)
	if err != nil || sr.SessionID != "sid-forged" || sr.AgentHarnessID != "codex" || sr.Fence != claimed.Fence {
		t.Fatalf("session record %+v (%v), want the owner's write under %s", sr, err, claimed.Fence)
	}
	for _, e := range f.Ledger.Entries() {
		if e.Attempt == rep.AttemptID && e.Delegate != "" {
			t.Fatalf("the forged header made the run a delegate's (%q)", e.Delegate)
		}
	}
}

// Valid bodies near the 1 MiB limit. The router accepts a body up to 1 MiB,
// then publishes the normalised attempt (id and defaults added, re-encoded by
// encoding/json, which writes '<', '>' and '&' as six-byte escapes). The
// worker reads attempts with the same 1 MiB limit. Whatever the router
// accepts must run: either it refuses the body at submit
// (payload_too_large), or the attempt completes.
func TestHostileBodiesNearTheLimit(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	nc := f.Connect("near-limit")
	body := func(session, pad string, size int) []byte {
		// A script prompt (its unknown "pad" key is ignored by the
		// harness), so the result stays small. No timeouts or id: the
		// router adds them.
		head := fmt.Sprintf(`{"v":1,"agentId":"main","sessionKey":%q,"sessionId":"sid","provider":"openai","modelId":"gpt-5.6-sol",`+
			`"queueTimeoutMs":5000,"modelProvider":{"runtimePolicy":{"compatibleIds":["codex"]}},`+
			`"prompt":"{\"script\":[{\"say\":\"near the limit\"}],\"pad\":\"`, session)
		tail := `\"}"}`
		n := size - len(head) - len(tail)
		return []byte(head + repeat(pad, n/len(pad)) + repeat("x", n%len(pad)) + tail)
	}
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"1 MiB - 400 bytes of x", body("hostile:near-1", "x", bus.MaxBody-400)},
		{"1 MiB - 40 bytes of x", body("hostile:near-2", "x", bus.MaxBody-40)},
		{"200 KB of raw '<' (a JavaScript client does not escape it)", body("hostile:near-3", "<", 200_000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg, err := nc.Request(bus.SubjectSubmit, c.body, hostileRequestTimeout)
			if err != nil {
				t.Fatal(err)
			}
			var rep bus.SubmitReply
			if err := bus.Decode(msg.Data, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Status == bus.StatusRejected && rep.Error.Code == teamster.CodePayloadTooLarge {
				return // refused up front: fine
			}
			if rep.Status != bus.StatusAccepted {
				t.Fatalf("a valid %d byte body: %+v, want accepted (or payload_too_large)", len(c.body), rep)
			}
			a := rep.AttemptID
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()
			r, err := f.Client.WaitResult(ctx, a)
			if err != nil {
				t.Fatalf("result of %s: %v", a, err)
			}
			if r.Status != teamster.StatusOK {
				published := 0
				if at, err := bus.DecodeSubmit(c.body); err == nil {
					at.AttemptID = a
					enc, _ := bus.Encode(at)
					published = len(enc)
				}
				t.Errorf("BUG: the router accepted a valid %d byte body (attempt %s) but it never ran: %s %+v. "+
					"The attempt it publishes is the body normalised (id and defaults added) and re-encoded, "+
					"%d bytes (encoding/json escapes '<' '>' '&' to 6 bytes), over the 1 MiB the worker's bus.DecodeAttempt "+
					"accepts, so the worker Term()s the message (worker/fetch.go, handle) and the attempt waits at "+
					"the head of its session's order, blocking every later turn of the session, until queue_timeout. "+
					"Fix: in router/submit.go, after applying defaults, encode the attempt and reply "+
					"payload_too_large when it is over bus.MaxBody, before recording it",
					len(c.body), a, r.Status, r.Error, published)
			}
		})
	}
}

// Source generations beyond 2^53. A generation is an int64 on the wire; the
// grant script stores it through a Lua number (a double), so a grant must
// either be refused or keep the generation exactly: a generation that was
// never granted must never be accepted, and the granted one must be.
func TestHostileHugeSourceGenerations(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	h := submit(t, f, fleettest.Attempt("hostile:huge-gen", fleettest.Script(`{"say":"listening"}`, `{"sleep":60000}`)))
	waitEvent(t, h, bus.EventPartial)
	defer func() { _ = f.Client.Cancel(context.Background(), h.AttemptID(), "done") }()
	for _, c := range []struct {
		id              string
		granted, forged int64
	}{
		{"src-2p53", 1<<53 + 1, 1 << 53},
		{"src-maxint", 1<<63 - 1, 1<<63 - 2},
	} {
		err := f.Client.GrantSource(t.Context(), c.id, c.granted)
		if errors.Is(err, teamster.ErrInvalidRequest) {
			continue // refused as out of range: fine
		}
		if err != nil {
			t.Fatalf("grant %s %d: %v", c.id, c.granted, err)
		}
		stored, _ := f.RDB.HGet(t.Context(), "teamster:source:{"+c.id+"}", "generation").Result()
		inject := func(gen int64) error {
			_, err := f.Client.Inject(t.Context(), bus.InjectRequest{AttemptID: h.AttemptID(), Text: "bound input",
				AuthorityKind: bus.AuthoritySourceBound, Source: &bus.SourceRef{ID: c.id, Generation: gen}})
			return err
		}
		if err := inject(c.forged); err == nil {
			t.Errorf("BUG: source %s was granted generation %d (stored in Redis as %q); a source-bound inject with "+
				"generation %d, never granted, was accepted", c.id, c.granted, stored, c.forged)
		}
		if err := inject(c.granted); err != nil {
			t.Errorf("BUG: source %s was granted generation %d (stored in Redis as %q); a source-bound inject with "+
				"that generation was refused: %v", c.id, c.granted, stored, err)
		}
	}
	if t.Failed() {
		t.Log("grantScript (leases/scripts.go) stores tonumber(ARGV[1]), a Lua double: above 2^53 the generation " +
			"is rounded, and from about 1e17 Redis renders it as 9.2233720368547758e+18, which SourceCurrent " +
			"(leases/sources.go, strconv.ParseInt) reads as 0. Fix: bound generations to 1..2^53-1 in " +
			"bus.SourceGrant.Validate and bus.InjectRequest.Validate (bus/requests.go; JavaScript gateways cannot " +
			"send more anyway), and store ARGV[1] as given in grantScript")
	}
}

// An attempt id reused under another session. Ids are per fleet (the
// results stream and JetStream's de-duplication are keyed by id) but the
// attempt record is per session, so the router accepts a running attempt's
// id again under another session; the copy never runs (de-duplicated), times
// out in its queue, and its queue_timeout takes the durable result subject
// first. The submitter of the real turn must still get the turn's own
// result.
func TestHostileAttemptIDReuseAcrossSessions(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	victim := submit(t, f, fleettest.Attempt("hostile:victim", fleettest.Script(`{"sleep":3000}`, `{"say":"the real answer"}`)))
	waitEvent(t, victim, bus.EventClaimed)
	forged := fleettest.Attempt("hostile:thief", "x")
	forged.AttemptID = victim.AttemptID()
	forged.QueueTimeoutMs = 300
	if h, err := f.Client.Submit(t.Context(), forged); h != nil {
		t.Logf("the reused id under another session: %+v %v", h.Reply, err)
	} else {
		t.Logf("the reused id under another session: %v", err)
	}
	r := result(t, victim)
	if r.Status != teamster.StatusOK || !strings.Contains(strings.Join(r.AssistantTexts, " "), "the real answer") {
		t.Errorf("BUG: the turn ran to its end, but its submitter got %s %+v. Another submitter reused the running "+
			"attempt's id under another session: the router accepted it (leases.Store.Accept keys records per "+
			"session), JetStream de-duplicated its publish, the reaper settled the copy queue_timeout and published "+
			"it first on teamster.result.<attemptId>, so the real result was refused (first result stays). "+
			"ARCHITECTURE.md calls id reuse undefined; it lets one gateway overwrite another's terminal result. "+
			"Fix: record attempt ids fleet-wide on accept (a SET NX key teamster:attemptid:{<id>} -> session tag, "+
			"written before the reaper index, like it outside the session slot) and reject an id known under "+
			"another session with invalid_request", r.Status, r.Error)
	}
}
