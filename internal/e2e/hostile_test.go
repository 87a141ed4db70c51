package e2e

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/selection"
)

// Hostile input (docs/PROTOCOL.md guarantee 7: a malformed or unauthorised
// request is answered with a typed error and changes no state; everyone else
// keeps being served). A catalogue of raw requests on every subject that takes
// input, each with the reply it must get, sent to a fleet that has a
// finished, locked session, two running turns (a V2 and a V1 harness) and
// granted and revoked sources to aim at. Around every request the test
// snapshots Redis and the JetStream streams and requires them unchanged.
//
// What a hostile client can send, and where it is covered:
//   - Bodies: anything, up to the server's max_payload (8 MiB): malformed,
//     deeply nested, wrong types, huge, forged fields. The catalogue.
//   - Subjects: any token in the subjects it may publish on, including
//     literal '*' and '>' and unicode (a subject with a space is refused by
//     the client library before it is sent). The catalogue.
//   - Headers: Teamster-Delegate on any request. The catalogue (session ops,
//     submit) and TestHostileForgedFieldsAreIgnored.
//   - Fences: there is no fence input on the wire. A fence appears only in
//     what the fleet sends (the claimed event, results), and every fenced
//     write is a worker's own Redis script call. A client can put a
//     "fence" (or worker, state, outcome, seq) field in a body; readers ignore
//     unknown fields: TestHostileForgedFieldsAreIgnored checks that a forged
//     fence neither reaches Redis nor the result.
//   - Forged events or results on someone's replyTo inbox, or publishes on
//     teamster.attempt.> and teamster.result.>: only NATS permissions stand
//     in the way (deploy/compose), so they are not part of this suite.
//
// Snapshots ignore what changes on its own while turns run: lease TTLs (the
// holders renew them), the reaper index's scores (renewals and the reaper's
// visibility window move them), and the running attempts' "seqmax" (the event
// seq reservation: every refused injection is reported as an injection event
// to the turn's replyTo, and the next renewal carries the reservation
// forward). Everything else, values and expiry, must stay as it was.

const hostileRequestTimeout = 10 * time.Second

// hostileAwait waits (long) for injected input that never comes: every
// hostile inject is refused.
var hostileAwait = fleettest.Script(`{"say":"waiting"}`, `{"awaitInjection":600000}`, `{"say":"done"}`)

type replyKind int

const (
	replySubmit  replyKind = iota // bus.SubmitReply
	replyInject                   // bus.InjectReply
	replyPlain                    // bus.Reply
	replyControl                  // bus.WorkerControlReply
)

// outcome is what a request must get: a reply with status (and code when
// rejected), or no responder at all.
type outcome struct {
	status       string
	code         teamster.Code
	noResponders bool
}

func rejectedWith(c teamster.Code) outcome { return outcome{status: bus.StatusRejected, code: c} }

var (
	invalid      = rejectedWith(teamster.CodeInvalidRequest)
	tooLarge     = rejectedWith(teamster.CodePayloadTooLarge)
	okReply      = outcome{status: bus.StatusOK}
	noResponders = outcome{noResponders: true}
)

func (o outcome) String() string {
	switch {
	case o.noResponders:
		return "no responders"
	case o.code != "":
		return o.status + " " + string(o.code)
	}
	return o.status
}

type hostileCase struct {
	group   string // the subject pattern, for the counts
	name    string
	subject string
	body    []byte
	header  nats.Header
	kind    replyKind
	want    outcome
}

// hostileFleet is the fleet and what the catalogue aims at.
type hostileFleet struct {
	f  *fleettest.Fleet
	nc *nats.Conn
	js jetstream.JetStream

	locked          string // a codex-locked session whose owner turn finished
	finishedAttempt string
	v2Session       string // running on codex (V2 injection)
	v1Session       string // running on claude-cli (V1 injection)
	v2, v1          *client.Handle
}

func startHostileFleet(t *testing.T) *hostileFleet {
	t.Helper()
	f := fleettest.Start(t, fleettest.Options{Workers: 2})
	hf := &hostileFleet{f: f, nc: f.Connect("hostile"), locked: "hostile:locked",
		v2Session: "hostile:running-v2", v1Session: "hostile:running-v1"}
	js, err := jetstream.New(f.Connect("hostile-inspect"))
	if err != nil {
		t.Fatal(err)
	}
	hf.js = js
	owner := submit(t, f, ownerAttempt(hf.locked, "owner turn"))
	if r := result(t, owner); r.Status != teamster.StatusOK {
		t.Fatalf("owner turn: %+v", r)
	}
	hf.finishedAttempt = owner.AttemptID()
	for _, g := range []struct {
		id  string
		gen int64
	}{{"src-granted", 3}, {"src-revoked", 1}} {
		if err := f.Client.GrantSource(t.Context(), g.id, g.gen); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Client.RevokeSource(t.Context(), "src-revoked"); err != nil {
		t.Fatal(err)
	}
	hf.v2 = submit(t, f, fleettest.Attempt(hf.v2Session, hostileAwait))
	v1 := fleettest.Attempt(hf.v1Session, hostileAwait)
	v1.Provider, v1.ModelID = "anthropic", "claude-opus-5"
	v1.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"claude-cli"}}}
	hf.v1 = submit(t, f, v1)
	waitEvent(t, hf.v2, bus.EventPartial) // running, its injection handle installed
	waitEvent(t, hf.v1, bus.EventPartial)
	return hf
}

// TestHostileInputCatalogue sends every case, checks its reply and that the
// fleet's state did not change, checks the fleet still serves in the middle
// and at the end, and that the running turns never saw hostile input.
func TestHostileInputCatalogue(t *testing.T) {
	started := time.Now()
	hf := startHostileFleet(t)
	cases := hf.catalogue()
	counts := map[string]int{}
	codes := map[string]int{}
	for _, c := range cases {
		counts[c.group]++
		codes[c.want.String()]++
	}
	for _, g := range sortedKeys(counts) {
		if counts[g] < 30 {
			t.Errorf("only %d cases on %s, want at least 30", counts[g], g)
		}
		t.Logf("%4d cases on %s", counts[g], g)
	}
	for _, c := range sortedKeys(codes) {
		t.Logf("%4d expect %s", codes[c], c)
	}
	t.Logf("%d cases; fleet ready in %s", len(cases), time.Since(started).Round(time.Millisecond))

	catalogueStarted := time.Now()
	half := len(cases) / 2
	for i := 0; i < len(cases); {
		end := half
		if i >= half {
			end = len(cases)
		}
		first, before := i, hf.snapshot(t)
		for ; i < end; i++ {
			hf.run(t, cases[i])
		}
		// Late, asynchronous effects of any case in this half.
		time.Sleep(500 * time.Millisecond)
		if d := before.diff(hf.snapshot(t)); d != "" {
			t.Errorf("fleet state after cases %d..%d differs from before them (-before +after):\n%s", first, end-1, d)
		}
		// The fleet keeps serving: in the middle of the catalogue and after it.
		h := submit(t, hf.f, fleettest.Attempt(fmt.Sprintf("hostile:still-serving-%d", i), "still here"))
		if r := result(t, h); r.Status != teamster.StatusOK {
			t.Fatalf("a valid submit after %d hostile requests: %+v", i, r)
		}
	}
	t.Logf("catalogue ran in %s", time.Since(catalogueStarted).Round(time.Millisecond))

	// The running turns never took hostile input: every injection their
	// runs reported is a refusal, one per case that reached them, with the
	// case's code.
	want := map[string]teamster.Code{hf.v2.AttemptID(): teamster.CodeSourceRevoked, hf.v1.AttemptID(): teamster.CodeInjectionRequiresV2}
	wantN := map[string]int{}
	for _, c := range cases {
		switch c.want.code {
		case teamster.CodeSourceRevoked:
			wantN[hf.v2.AttemptID()]++
		case teamster.CodeInjectionRequiresV2:
			wantN[hf.v1.AttemptID()]++
		}
	}
	for _, h := range []*client.Handle{hf.v2, hf.v1} {
		if err := hf.f.Client.Cancel(t.Context(), h.AttemptID(), "end of the catalogue"); err != nil {
			t.Fatalf("cancel %s: %v", h.AttemptID(), err)
		}
		evs := injectionEvents(t, h)
		r := result(t, h)
		if r.Status != teamster.StatusCancelled {
			t.Errorf("running turn %s ended %+v, want cancelled by the final cancel", h.AttemptID(), r)
		}
		for _, e := range evs {
			if e.State != bus.InjectionRejected || e.Code != want[h.AttemptID()] {
				t.Errorf("running turn %s reported injection %s %s %s: want every hostile item rejected %s",
					h.AttemptID(), e.InjectionID, e.State, e.Code, want[h.AttemptID()])
			}
		}
		if len(evs) != wantN[h.AttemptID()] || h.Dropped() != 0 {
			t.Errorf("running turn %s reported %d injections (%d events dropped), want %d: one per case that reached it",
				h.AttemptID(), len(evs), h.Dropped(), wantN[h.AttemptID()])
		}
		if strings.Contains(strings.Join(r.AssistantTexts, " "), "hostile") {
			t.Errorf("running turn %s's texts %q carry hostile input", h.AttemptID(), r.AssistantTexts)
		}
		t.Logf("turn %s reported %d refused injections", h.AttemptID(), len(evs))
	}
	t.Logf("total %s", time.Since(started).Round(time.Millisecond))
}

// run sends one case and checks its reply and the state around it.
func (hf *hostileFleet) run(t *testing.T, c hostileCase) {
	t.Helper()
	before := hf.snapshot(t)
	msg, err := hf.nc.RequestMsg(&nats.Msg{Subject: c.subject, Data: c.body, Header: c.header}, hostileRequestTimeout)
	got, detail := outcome{noResponders: true}, ""
	switch {
	case errors.Is(err, nats.ErrNoResponders):
	case err != nil:
		t.Errorf("%s: %s: request failed: %v", c.group, c.name, err)
		return
	default:
		got, detail = decodeReply(c.kind, msg.Data)
		if len(msg.Data) > 4096 {
			t.Errorf("%s: %s: a %d byte reply: replies must not echo the body", c.group, c.name, len(msg.Data))
		}
	}
	if got != c.want {
		t.Errorf("%s: %s: got %s, want %s (%s)", c.group, c.name, got, c.want, detail)
	}
	if d := before.diff(hf.snapshot(t)); d != "" {
		t.Errorf("%s: %s: the request changed the fleet's state (-before +after):\n%s", c.group, c.name, d)
	}
}

// decodeReply decodes a reply with the subject's strict decoder and returns
// its status and code, or a description of what was wrong with it.
func decodeReply(kind replyKind, b []byte) (outcome, string) {
	var (
		env    bus.Envelope
		status func() (string, *teamster.Error)
	)
	switch kind {
	case replySubmit:
		r := &bus.SubmitReply{}
		env, status = r, func() (string, *teamster.Error) { return r.Status, r.Error }
	case replyInject:
		r := &bus.InjectReply{}
		env, status = r, func() (string, *teamster.Error) { return r.Status, r.Error }
	case replyPlain:
		r := &bus.Reply{}
		env, status = r, func() (string, *teamster.Error) { return r.Status, r.Error }
	case replyControl:
		r := &bus.WorkerControlReply{}
		env, status = r, func() (string, *teamster.Error) { return r.Status, r.Error }
	}
	if err := bus.Decode(b, env); err != nil {
		return outcome{status: "undecodable reply"}, fmt.Sprintf("%v: %.300s", err, b)
	}
	st, e := status()
	o := outcome{status: st}
	if e != nil {
		o.code = e.Code
		return o, e.Message
	}
	return o, ""
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
