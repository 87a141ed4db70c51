package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
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

// fleetState is what the catalogue must not change.
type fleetState struct {
	Redis   map[string]string
	Expiry  map[string]time.Time // keys with a TTL, except leases
	Streams map[string]string    // stream: messages and last sequence
}

func (hf *hostileFleet) snapshot(t *testing.T) fleetState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := fleetState{Redis: map[string]string{}, Expiry: map[string]time.Time{}, Streams: map[string]string{}}
	rdb := hf.f.RDB
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	now := time.Now()
	for _, k := range keys {
		if leases.IsNodeKey(k) {
			// The routers' node markers (one per hash slot): no request
			// writes them, and reading 16,384 of them would stretch the
			// snapshot past the expiry tolerance.
			continue
		}
		v, ttl, err := redisValue(ctx, rdb, k)
		if errors.Is(err, redis.Nil) {
			continue // gone between KEYS and the read (a lease expiring)
		}
		if err != nil {
			t.Fatalf("snapshot %s: %v", k, err)
		}
		st.Redis[k] = v
		if ttl > 0 && !strings.HasSuffix(k, ":lease") {
			st.Expiry[k] = now.Add(ttl)
		}
	}
	for _, name := range []string{bus.StreamAttempts, bus.StreamResults} {
		s, err := hf.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("snapshot %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("snapshot %s: %v", name, err)
		}
		st.Streams[name] = fmt.Sprintf("msgs=%d lastSeq=%d", info.State.Msgs, info.State.LastSeq)
	}
	return st
}

// redisValue renders a key's value; see the package comment for what it
// leaves out.
func redisValue(ctx context.Context, rdb *redis.Client, k string) (string, time.Duration, error) {
	typ, err := rdb.Type(ctx, k).Result()
	if err != nil {
		return "", 0, err
	}
	var v string
	switch typ {
	case "none":
		return "", 0, redis.Nil
	case "string":
		v, err = rdb.Get(ctx, k).Result()
	case "hash":
		var m map[string]string
		m, err = rdb.HGetAll(ctx, k).Result()
		if strings.Contains(k, ":attempt:") {
			delete(m, "seqmax")
		}
		fields := make([]string, 0, len(m))
		for f, x := range m {
			fields = append(fields, f+"="+x)
		}
		sort.Strings(fields)
		v = "hash{" + strings.Join(fields, ", ") + "}"
	case "list":
		var l []string
		l, err = rdb.LRange(ctx, k, 0, -1).Result()
		v = fmt.Sprintf("list%q", l)
	case "set":
		var l []string
		l, err = rdb.SMembers(ctx, k).Result()
		sort.Strings(l)
		v = fmt.Sprintf("set%q", l)
	case "zset":
		var zs []redis.Z
		zs, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		var ms []string
		for _, z := range zs {
			m := fmt.Sprint(z.Member)
			if !leases.IsIndexKey(k) {
				m += "@" + strconv.FormatFloat(z.Score, 'f', -1, 64)
			}
			ms = append(ms, m)
		}
		sort.Strings(ms)
		v = fmt.Sprintf("zset%q", ms)
	default:
		v = "type " + typ
	}
	if err != nil {
		return "", 0, err
	}
	ttl, err := rdb.PTTL(ctx, k).Result()
	if err != nil {
		return "", 0, err
	}
	if ttl > 0 {
		v += " (expires)"
	}
	return v, ttl, nil
}

// diff describes how after differs from s; "" when it does not. Expiry
// times may move by up to a second (they are computed from remaining TTLs).
func (s fleetState) diff(after fleetState) string {
	d := cmp.Diff(s.Redis, after.Redis) + cmp.Diff(s.Streams, after.Streams)
	for k, at := range s.Expiry {
		if bt, ok := after.Expiry[k]; ok && (bt.Sub(at) > time.Second || at.Sub(bt) > time.Second) {
			d += fmt.Sprintf("expiry of %s moved from %s to %s\n", k, at.Format(time.RFC3339Nano), bt.Format(time.RFC3339Nano))
		}
	}
	return d
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Bodies and helpers for building them.

func repeat(s string, n int) string { return strings.Repeat(s, n) }

// padTo pads a JSON object body (ending in "}") with an unknown string field
// so that the whole body is exactly n bytes.
func padTo(obj string, n int) []byte {
	head := strings.TrimSuffix(obj, "}")
	sep := ","
	if strings.HasSuffix(head, "{") {
		sep = ""
	}
	head += sep + `"pad":"`
	fill := n - len(head) - len(`"}`)
	if fill < 0 {
		panic("padTo: body already longer than n")
	}
	return []byte(head + repeat("x", fill) + `"}`)
}

// unicodeText is unicode-heavy text: astral characters, combining marks,
// right-to-left and zero-width characters, a BOM-like character, emoji ZWJ
// sequences.
const unicodeText = "𝕳𝖔𝖘𝖙𝖎𝖑𝖊 ℌ𝔢𝔩𝔩𝔬 Z̸̢̛̙̳̈́a̷̰͐l̶̡̈g̵̣̈́o̴͈̊ \u202etxet desrever\u202c zero\u200bwidth\ufeff 👩\u200d👩\u200d👧 日本語 العربية עברית"

// genericBodies are hostile bodies that no subject may accept: malformed,
// nested past any sane depth, the wrong shape, a missing or wrong version,
// or too large. Each is sent to every subject.
func genericBodies() []struct {
	name string
	body []byte
	want outcome
} {
	nestedArrays := repeat("[", 100_000) + repeat("]", 100_000)
	nestedObjects := `{"v":1,"x":` + repeat(`{"a":`, 100_000) + "1" + repeat("}", 100_000) + "}"
	zeros := strings.TrimSuffix(repeat("0,", 200_000), ",")
	return []struct {
		name string
		body []byte
		want outcome
	}{
		{"empty body", nil, invalid},
		{"null", []byte("null"), invalid},
		{"an array", []byte(`[1,2,3]`), invalid},
		{"a string", []byte(`"teamster"`), invalid},
		{"a number", []byte(`42`), invalid},
		{"true", []byte(`true`), invalid},
		{"truncated in a string", []byte(`{"v":1,"sessionKey":"s`), invalid},
		{"truncated after a colon", []byte(`{"v":`), invalid},
		{"100,000 nested arrays", []byte(nestedArrays), invalid},
		{"100,000 unclosed arrays", []byte(repeat("[", 100_000)), invalid},
		{"100,000 nested objects in an unknown field", []byte(nestedObjects), invalid},
		{"v missing", []byte(`{}`), invalid},
		{"v 2", []byte(`{"v":2}`), invalid},
		{"v 0", []byte(`{"v":0}`), invalid},
		{"v -1", []byte(`{"v":-1}`), invalid},
		{"v as a string", []byte(`{"v":"1"}`), invalid},
		{"v as a fraction", []byte(`{"v":1.5}`), invalid},
		{"v 1e400", []byte(`{"v":1e400}`), invalid},
		{"v with 100,000 digits", []byte(`{"v":` + repeat("9", 100_000) + `}`), invalid},
		{"v null", []byte(`{"v":null}`), invalid},
		{"v true", []byte(`{"v":true}`), invalid},
		{"v an array", []byte(`{"v":[1]}`), invalid},
		{"trailing garbage", []byte(`{"v":1} trailing`), invalid},
		{"two objects", []byte(`{"v":1}{"v":1}`), invalid},
		{"UTF-8 BOM", []byte("\xef\xbb\xbf{\"v\":1}"), invalid},
		{"invalid UTF-8", []byte("\xff\xfe\xfd\xfc"), invalid},
		{"NUL bytes", []byte("\x00\x00\x00"), invalid},
		{"NaN", []byte(`{"v":NaN}`), invalid},
		{"single quotes", []byte(`{'v':1}`), invalid},
		{"a comment", []byte(`{"v":1 /* hi */}`), invalid},
		{"unicode-heavy keys and values, v missing", []byte(`{"` + unicodeText + `":"` + unicodeText + `","text":"` + unicodeText + `"}`), invalid},
		{"200,000-element array, v missing", []byte(`{"x":[` + zeros + `]}`), invalid},
		{"just under 1 MiB, v missing", padTo(`{}`, bus.MaxBody), invalid},
		{"just over 1 MiB", padTo(`{"v":1}`, bus.MaxBody+1), tooLarge},
		{"2 MiB", padTo(`{"v":1}`, 2*bus.MaxBody), tooLarge},
	}
}

// catalogue builds every case.
func (hf *hostileFleet) catalogue() []hostileCase {
	var cases []hostileCase
	add := func(group, subject string, kind replyKind, name string, body []byte, want outcome, header nats.Header) {
		cases = append(cases, hostileCase{group: group, name: name, subject: subject, body: body, header: header, kind: kind, want: want})
	}
	generic := func(group, subject string, kind replyKind) {
		for _, g := range genericBodies() {
			add(group, subject, kind, g.name, g.body, g.want, nil)
		}
	}
	delegateHeader := func(id string) nats.Header { return nats.Header{bus.HeaderDelegate: []string{id}} }
	v2, v1 := hf.v2.AttemptID(), hf.v1.AttemptID()

	// teamster.submit: the owner's subject.
	{
		const g, subj = "teamster.submit", bus.SubjectSubmit
		generic(g, subj, replySubmit)
		base := `"v":1,"agentId":"main","sessionKey":"hostile:submit","sessionId":"sid","provider":"openai","modelId":"gpt-5.6-sol","prompt":"hi","modelProvider":{"runtimePolicy":{"compatibleIds":["codex"]}}`
		with := func(extra string) []byte { return []byte("{" + base + "," + extra + "}") }
		without := func(field string) []byte {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte("{"+base+"}"), &m); err != nil {
				panic(err)
			}
			delete(m, field)
			b, _ := json.Marshal(m)
			return b
		}
		for _, c := range []struct {
			name string
			body []byte
			want outcome
		}{
			{"a delegate field", with(`"delegate":"voice-call"`), invalid},
			{"a delegate field, null", with(`"delegate":null`), invalid},
			{"a delegate field, an object", with(`"delegate":{"id":"voice-call"}`), invalid},
			{"a delegate field, empty", with(`"delegate":""`), invalid},
			{"no sessionKey", without("sessionKey"), invalid},
			{"no agentId", without("agentId"), invalid},
			{"no provider", without("provider"), invalid},
			{"no modelId", without("modelId"), invalid},
			{"no sessionId", without("sessionId"), invalid},
			{"sessionKey of 1025 bytes", with(`"sessionKey":"` + repeat("k", 1025) + `"`), invalid},
			{"sessionKey just under 1 MiB", padTo(`{"v":1,"agentId":"main","sessionId":"sid","provider":"openai","modelId":"m","prompt":"hi","sessionKey":"`+repeat("k", bus.MaxBody-200)+`"}`, bus.MaxBody), invalid},
			{"sessionKey with NUL", with(`"sessionKey":"a\u0000b"`), invalid},
			{"sessionKey with a newline", with(`"sessionKey":"a\nb"`), invalid},
			{"sessionKey a number", with(`"sessionKey":7`), invalid},
			{"attemptId a.b", with(`"attemptId":"a.b"`), invalid},
			{"attemptId *", with(`"attemptId":"*"`), invalid},
			{"attemptId >", with(`"attemptId":">"`), invalid},
			{"attemptId with a space", with(`"attemptId":"a b"`), invalid},
			{"attemptId unicode", with(`"attemptId":"ünïcødé"`), invalid},
			{"attemptId of 65 characters", with(`"attemptId":"` + repeat("a", 65) + `"`), invalid},
			{"attemptId with a leading dash", with(`"attemptId":"-a"`), invalid},
			{"agentHarnessId co.dex", with(`"agentHarnessId":"co.dex"`), invalid},
			{"agentHarnessRuntimeOverride >", with(`"agentHarnessRuntimeOverride":">"`), invalid},
			{"hostId gw.*", with(`"hostId":"gw.*"`), invalid},
			{"replyTo with a wildcard", with(`"replyTo":"_INBOX.*"`), invalid},
			{"replyTo with an empty token", with(`"replyTo":"a..b"`), invalid},
			{"replyTo with a space", with(`"replyTo":"has space"`), invalid},
			{"replyTo >", with(`"replyTo":">"`), invalid},
			{"timeoutMs -1", with(`"timeoutMs":-1`), invalid},
			{"timeoutMs 86400001", with(`"timeoutMs":86400001`), invalid},
			{"timeoutMs 1e20", with(`"timeoutMs":1e20`), invalid},
			{"timeoutMs 1.5", with(`"timeoutMs":1.5`), invalid},
			{"timeoutMs a string", with(`"timeoutMs":"600000"`), invalid},
			{"queueTimeoutMs -5", with(`"queueTimeoutMs":-5`), invalid},
			{"queueTimeoutMs max int64", with(`"queueTimeoutMs":9223372036854775807`), invalid},
			{"queueTimeoutMs past int64", with(`"queueTimeoutMs":9223372036854775808`), invalid},
			{"settlementTimeoutMs -1", with(`"settlementTimeoutMs":-1`), invalid},
			{"settlementTimeoutMs 3600001", with(`"settlementTimeoutMs":3600001`), invalid},
			{"requestTransportOverrides maybe", with(`"modelProvider":{"requestTransportOverrides":"maybe"}`), invalid},
			{"compatibleIds with co.dex", with(`"modelProvider":{"runtimePolicy":{"compatibleIds":["co.dex"]}}`), invalid},
			{"images not objects", with(`"images":[1,"x"]`), invalid},
			{"a tool without a name", with(`"tools":[{"name":""}]`), invalid},
			{"tools an object", with(`"tools":{}`), invalid},
			{"toolsAllow with an empty name", with(`"toolsAllow":[""]`), invalid},
			{"expectedRuntimeArtifact without id", with(`"expectedRuntimeArtifact":{"id":"","fingerprint":"f"}`), invalid},
			{"prompt an object", with(`"prompt":{}`), invalid},
			{"modelSelectionLocked a string", with(`"modelSelectionLocked":"yes"`), invalid},
			{"routes a string", with(`"routes":"x"`), invalid},
			{"unicode-heavy prompt, invalid attemptId", with(`"prompt":"` + unicodeText + `","attemptId":"` + unicodeText + `"`), invalid},
			{"forged fence, invalid agentHarnessId", with(`"fence":"x:999","agentHarnessId":"x.y"`), invalid},
			{"pinned to an unregistered harness", with(`"agentHarnessId":"ghost"`), rejectedWith(teamster.CodeHarnessNotRegistered)},
			{"pinned to codex without a route", []byte(`{"v":1,"agentId":"main","sessionKey":"hostile:submit","sessionId":"sid","provider":"openai","modelId":"gpt-5.6-sol","prompt":"hi","agentHarnessId":"codex"}`), rejectedWith(teamster.CodeHarnessUnsupportedRoute)},
			{"pinned to openclaw: fallback, nothing recorded", with(`"agentHarnessId":"openclaw"`), outcome{status: bus.StatusFallback}},
			{"no harness for the provider: fallback", with(`"provider":"mistral"`), outcome{status: bus.StatusFallback}},
		} {
			add(g, subj, replySubmit, c.name, c.body, c.want, nil)
		}
		add(g, subj, replySubmit, "Teamster-Delegate header, invalid body", with(`"timeoutMs":-1`), invalid, delegateHeader("voice-call"))
	}

	// teamster.submit.delegate.<pluginId>: a delegate's subject.
	{
		const g = "teamster.submit.delegate.<pluginId>"
		subj := "teamster.submit.delegate.voice-call"
		generic(g, subj, replySubmit)
		s := hf.locked
		base := map[string]any{"v": 1, "agentId": "main", "sessionKey": s, "sessionId": "sid-" + s, "storePath": "/var/openclaw/" + s,
			"provider": "openai", "modelId": "gpt-5.6-sol", "prompt": "hostile delegate turn", "agentHarnessId": "codex",
			"agentHarnessRuntimeOverride": "codex", "modelSelectionLocked": true,
			"modelProvider": map[string]any{"runtimePolicy": map[string]any{"compatibleIds": []string{"codex"}}}}
		body := func(change map[string]any) []byte {
			m := map[string]any{}
			for k, v := range base {
				m[k] = v
			}
			for k, v := range change {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			b, _ := json.Marshal(m)
			return b
		}
		denied := rejectedWith(teamster.CodeDelegationDenied)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"an unlisted delegate", "teamster.submit.delegate.sms-bridge", body(nil), denied},
			{"the owner's own plugin", "teamster.submit.delegate.codex", body(nil), denied},
			{"wrong sessionId", subj, body(map[string]any{"sessionId": "another"}), denied},
			{"wrong storePath", subj, body(map[string]any{"storePath": "/elsewhere"}), denied},
			{"wrong agentId", subj, body(map[string]any{"agentId": "other-agent"}), denied},
			{"modelSelectionLocked false", subj, body(map[string]any{"modelSelectionLocked": false}), denied},
			{"agentHarnessId not the pin", subj, body(map[string]any{"agentHarnessId": "claude-cli"}), denied},
			{"agentHarnessRuntimeOverride missing", subj, body(map[string]any{"agentHarnessRuntimeOverride": nil}), denied},
			{"a session with no record", subj, body(map[string]any{"sessionKey": "hostile:nobody"}), denied},
			{"the running session (no record yet)", subj, body(map[string]any{"sessionKey": hf.v2Session, "sessionId": "sid-" + hf.v2Session, "storePath": "/var/openclaw/" + hf.v2Session}), denied},
			{"unicode-heavy sessionId", subj, body(map[string]any{"sessionId": unicodeText}), denied},
			{"a delegate field naming itself", subj, body(map[string]any{"delegate": "voice-call"}), invalid},
			{"a delegate field naming the owner", subj, body(map[string]any{"delegate": "codex"}), invalid},
			{"a delegate field, null", subj, append(body(nil)[:len(body(nil))-1], []byte(`,"delegate":null}`)...), invalid},
			{"pluginId * (literal)", "teamster.submit.delegate.*", body(nil), invalid},
			{"pluginId > (literal)", "teamster.submit.delegate.>", body(nil), invalid},
			{"pluginId unicode", "teamster.submit.delegate.vöice-call", body(nil), invalid},
			{"pluginId of 65 characters", "teamster.submit.delegate." + repeat("v", 65), body(nil), invalid},
			{"pluginId with a leading dash", "teamster.submit.delegate.-voice", body(nil), invalid},
			{"pluginId with a dot", "teamster.submit.delegate.voice.call", body(nil), noResponders},
			{"no pluginId", "teamster.submit.delegate", body(nil), noResponders},
			{"timeoutMs out of range", subj, body(map[string]any{"timeoutMs": 86400001}), invalid},
		} {
			add(g, c.subject, replySubmit, c.name, c.body, c.want, nil)
		}
		add(g, subj, replySubmit, "a forged Teamster-Delegate header naming the owner", body(map[string]any{"sessionId": "another"}), denied, delegateHeader("codex"))
	}

	// teamster.inject: the router finds the running turn.
	{
		const g, subj = "teamster.inject", bus.SubjectInject
		generic(g, subj, replyInject)
		inj := func(fields string) []byte { return []byte(`{"v":1,` + fields + `}`) }
		bySession := func(session, rest string) []byte { return inj(fmt.Sprintf(`"sessionKey":%q,%s`, session, rest)) }
		bound := func(src string, gen string) string {
			return fmt.Sprintf(`"text":"hostile words","authorityKind":"source-bound","source":{"id":%q,"generation":%s}`, src, gen)
		}
		revoked := rejectedWith(teamster.CodeSourceRevoked)
		noRun := rejectedWith(teamster.CodeNoActiveRun)
		for _, c := range []struct {
			name string
			body []byte
			want outcome
		}{
			{"neither sessionKey nor attemptId", inj(`"text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId a.b", inj(`"attemptId":"a.b","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId *", inj(`"attemptId":"*","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId >", inj(`"attemptId":">","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId with a space", inj(`"attemptId":"a b","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId unicode", inj(`"attemptId":"ünï","text":"hostile","authorityKind":"run"`), invalid},
			{"sessionKey of 1025 bytes", bySession(repeat("k", 1025), `"text":"hostile","authorityKind":"run"`), invalid},
			{"sessionKey with NUL", inj(`"sessionKey":"a\u0000b","text":"hostile","authorityKind":"run"`), invalid},
			{"no text", bySession(hf.v2Session, `"authorityKind":"run"`), invalid},
			{"text a number", bySession(hf.v2Session, `"text":5,"authorityKind":"run"`), invalid},
			{"no authorityKind", bySession(hf.v2Session, `"text":"hostile"`), invalid},
			{"authorityKind root", bySession(hf.v2Session, `"text":"hostile","authorityKind":"root"`), invalid},
			{"run input with a source", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","source":{"id":"src-granted","generation":3}`), invalid},
			{"source-bound without a source", bySession(hf.v2Session, `"text":"hostile","authorityKind":"source-bound"`), invalid},
			{"source id src.x", bySession(hf.v2Session, bound("src.x", "3")), invalid},
			{"generation 0", bySession(hf.v2Session, bound("src-granted", "0")), invalid},
			{"generation -7", bySession(hf.v2Session, bound("src-granted", "-7")), invalid},
			{"generation 1e30", bySession(hf.v2Session, bound("src-granted", "1e30")), invalid},
			{"generation a string", bySession(hf.v2Session, bound("src-granted", `"3"`)), invalid},
			{"debounceMs -1", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","debounceMs":-1`), invalid},
			{"debounceMs 60001", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","debounceMs":60001`), invalid},
			{"images not objects", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","images":["x"]`), invalid},
			{"a session with no running turn", bySession("hostile:idle", `"text":"hostile","authorityKind":"run"`), noRun},
			{"the finished session", bySession(hf.locked, `"text":"hostile","authorityKind":"run"`), noRun},
			{"an attempt that never existed", inj(`"attemptId":"01HOSTILE0000000000000000","text":"hostile","authorityKind":"run"`), noRun},
			{"a finished attempt", inj(fmt.Sprintf(`"attemptId":%q,"text":"hostile","authorityKind":"run"`, hf.finishedAttempt)), noRun},
			{"unicode-heavy text, no running turn", bySession("hostile:idle", `"text":"`+unicodeText+`","authorityKind":"run"`), noRun},
			{"text just under 1 MiB, no running turn", padTo(string(bySession("hostile:idle", `"text":"`+repeat("t", bus.MaxBody-200)+`","authorityKind":"run"`)), bus.MaxBody), noRun},
			{"source-bound, a generation never granted", bySession(hf.v2Session, bound("src-never", "1")), revoked},
			{"source-bound, the revoked generation", bySession(hf.v2Session, bound("src-revoked", "1")), revoked},
			{"source-bound, max int64 generation", bySession(hf.v2Session, bound("src-granted", "9223372036854775807")), rejectedWith(teamster.CodeInvalidRequest)},
			{"source-bound, generation 2^53", bySession(hf.v2Session, bound("src-granted", "9007199254740992")), rejectedWith(teamster.CodeInvalidRequest)},
			{"source-bound, generation 2^53-1 never granted", bySession(hf.v2Session, bound("src-granted", "9007199254740991")), revoked},
			{"source-bound, a generation below the grant", bySession(hf.v2Session, bound("src-granted", "2")), revoked},
			{"source-bound, a generation above the grant", bySession(hf.v2Session, bound("src-granted", "4")), revoked},
			{"source-bound by attemptId, never granted", inj(fmt.Sprintf(`"attemptId":%q,%s`, v2, bound("src-never", "1"))), revoked},
			{"source-bound, unicode-heavy text, never granted", bySession(hf.v2Session, fmt.Sprintf(`"text":%q,"authorityKind":"source-bound","source":{"id":"src-never","generation":1}`, unicodeText)), revoked},
			{"source-bound to the V1 harness", bySession(hf.v1Session, bound("src-granted", "3")), rejectedWith(teamster.CodeInjectionRequiresV2)},
		} {
			add(g, subj, replyInject, c.name, c.body, c.want, nil)
		}
	}

	// teamster.run.<attemptId>.inject: straight to the worker running it.
	{
		const g = "teamster.run.<attemptId>.inject"
		subj, _ := bus.RunInjectSubject(v2)
		v1subj, _ := bus.RunInjectSubject(v1)
		generic(g, subj, replyInject)
		inj := func(rest string) []byte { return []byte(`{"v":1,` + rest + `}`) }
		bound := func(src, gen string) []byte {
			return inj(fmt.Sprintf(`"text":"hostile words","authorityKind":"source-bound","source":{"id":%q,"generation":%s}`, src, gen))
		}
		revoked := rejectedWith(teamster.CodeSourceRevoked)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"attemptId naming another run", subj, inj(fmt.Sprintf(`"attemptId":%q,"text":"hostile","authorityKind":"run"`, v1)), invalid},
			{"attemptId a.b", subj, inj(`"attemptId":"a.b","text":"hostile","authorityKind":"run"`), invalid},
			{"no text", subj, inj(`"authorityKind":"run"`), invalid},
			{"empty text", subj, inj(`"text":"","authorityKind":"run"`), invalid},
			{"text an array", subj, inj(`"text":["hostile"],"authorityKind":"run"`), invalid},
			{"no authorityKind", subj, inj(`"text":"hostile"`), invalid},
			{"authorityKind owner", subj, inj(`"text":"hostile","authorityKind":"owner"`), invalid},
			{"run input with a source", subj, inj(`"text":"hostile","authorityKind":"run","source":{"id":"src-granted","generation":3}`), invalid},
			{"source-bound without a source", subj, inj(`"text":"hostile","authorityKind":"source-bound"`), invalid},
			{"source id *", subj, bound("*", "3"), invalid},
			{"generation 0", subj, bound("src-granted", "0"), invalid},
			{"generation past int64", subj, bound("src-granted", "9223372036854775808"), invalid},
			{"debounceMs 1e9", subj, inj(`"text":"hostile","authorityKind":"run","debounceMs":1000000000`), invalid},
			{"images a string", subj, inj(`"text":"hostile","authorityKind":"run","images":"x"`), invalid},
			{"a generation never granted", subj, bound("src-never", "1"), revoked},
			{"the revoked generation", subj, bound("src-revoked", "1"), revoked},
			{"a generation above the revoked one, never granted", subj, bound("src-revoked", "2"), revoked},
			{"max int64 generation", subj, bound("src-granted", "9223372036854775807"), rejectedWith(teamster.CodeInvalidRequest)},
			{"a generation below the grant", subj, bound("src-granted", "1"), revoked},
			{"a generation above the grant", subj, bound("src-granted", "4"), revoked},
			{"unicode-heavy text, never granted", subj, inj(fmt.Sprintf(`"text":%q,"authorityKind":"source-bound","source":{"id":"src-never","generation":1}`, unicodeText)), revoked},
			{"text just under 1 MiB, never granted", subj, padTo(`{"v":1,"authorityKind":"source-bound","source":{"id":"src-never","generation":1},"text":"`+repeat("t", bus.MaxBody-300)+`"}`, bus.MaxBody), revoked},
			{"source-bound to the V1 run", v1subj, bound("src-granted", "3"), rejectedWith(teamster.CodeInjectionRequiresV2)},
			{"an attempt nobody runs", "teamster.run.01HOSTILE0000000000000000.inject", inj(`"text":"hostile","authorityKind":"run"`), noResponders},
			{"the finished attempt", "teamster.run." + hf.finishedAttempt + ".inject", inj(`"text":"hostile","authorityKind":"run"`), noResponders},
			{"attemptId * (literal)", "teamster.run.*.inject", inj(`"text":"hostile","authorityKind":"run"`), noResponders},
			{"teamster.run.> (literal)", "teamster.run.>", inj(`"text":"hostile","authorityKind":"run"`), noResponders},
			{"an extra token", subj + ".x", inj(`"text":"hostile","authorityKind":"run"`), noResponders},
		} {
			add(g, c.subject, replyInject, c.name, c.body, c.want, nil)
		}
	}

	// teamster.run.<attemptId>.cancel: none of these may cancel the run.
	{
		const g = "teamster.run.<attemptId>.cancel"
		subj, _ := bus.RunCancelSubject(v2)
		generic(g, subj, replyPlain)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"reason with NUL", subj, []byte(`{"v":1,"reason":"a\u0000b"}`), invalid},
			{"reason with a newline", subj, []byte(`{"v":1,"reason":"a\nb"}`), invalid},
			{"reason with an escape sequence", subj, []byte(`{"v":1,"reason":"\u001b[31mred"}`), invalid},
			{"reason of 257 bytes", subj, []byte(`{"v":1,"reason":"` + repeat("r", 257) + `"}`), invalid},
			{"reason just under 1 MiB", subj, padTo(`{"v":1,"reason":"`+repeat("r", bus.MaxBody-100)+`"}`, bus.MaxBody), invalid},
			{"reason a number", subj, []byte(`{"v":1,"reason":5}`), invalid},
			{"reason an object", subj, []byte(`{"v":1,"reason":{}}`), invalid},
			{"v 2 with a reason", subj, []byte(`{"v":2,"reason":"stop"}`), invalid},
			{"an attempt nobody runs", "teamster.run.01HOSTILE0000000000000000.cancel", []byte(`{"v":1}`), noResponders},
			{"the finished attempt", "teamster.run." + hf.finishedAttempt + ".cancel", []byte(`{"v":1}`), noResponders},
			{"attemptId * (literal)", "teamster.run.*.cancel", []byte(`{"v":1}`), noResponders},
			{"teamster.run.> (literal)", "teamster.run.>", []byte(`{"v":1}`), noResponders},
			{"an extra token", subj + ".x", []byte(`{"v":1}`), noResponders},
		} {
			add(g, c.subject, replyPlain, c.name, c.body, c.want, nil)
		}
	}

	// teamster.session.<op>: owner-only operations.
	{
		const g = "teamster.session.<op>"
		generic(g, "teamster.session.reset", replyPlain)
		ops := []string{"create", "patch", "reset", "delete", "archive"}
		body := func(session, rest string) []byte {
			if rest != "" {
				rest = "," + rest
			}
			return []byte(fmt.Sprintf(`{"v":1,"sessionKey":%q%s}`, session, rest))
		}
		for _, op := range ops {
			add(g, "teamster.session."+op, replyPlain, op+" from a delegate (header)", body(hf.locked, `"sessionId":"hijacked"`),
				rejectedWith(teamster.CodeOwnerOnly), delegateHeader("voice-call"))
			add(g, "teamster.session."+op, replyPlain, op+" of the running session", body(hf.v2Session, `"sessionId":"hijacked"`),
				rejectedWith(teamster.CodeSessionBusy), nil)
		}
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
			header        nats.Header
		}{
			{"reset, delegate key in the body", "teamster.session.reset", body(hf.locked, `"delegate":"voice-call"`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"delete, delegate key null", "teamster.session.delete", body(hf.locked, `"delegate":null`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"patch, delegate key empty", "teamster.session.patch", body(hf.locked, `"delegate":""`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"archive, delegate key an object", "teamster.session.archive", body(hf.locked, `"delegate":{"id":"codex"}`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"reset, header and body", "teamster.session.reset", body(hf.locked, `"delegate":"voice-call"`), rejectedWith(teamster.CodeOwnerOnly), delegateHeader("voice-call")},
			{"reset, the owner's own plugin as the header", "teamster.session.reset", body(hf.locked, ""), rejectedWith(teamster.CodeOwnerOnly), delegateHeader("codex")},
			{"an unknown op", "teamster.session.explode", body(hf.locked, ""), invalid, nil},
			{"an op in capitals", "teamster.session.RESET", body(hf.locked, ""), invalid, nil},
			{"a unicode op", "teamster.session.ünï", body(hf.locked, ""), invalid, nil},
			{"op * (literal)", "teamster.session.*", body(hf.locked, ""), invalid, nil},
			{"op > (literal)", "teamster.session.>", body(hf.locked, ""), invalid, nil},
			{"an unknown op from a delegate", "teamster.session.explode", body(hf.locked, ""), invalid, delegateHeader("voice-call")},
			{"an extra token", "teamster.session.reset.x", body(hf.locked, ""), noResponders, nil},
			{"no sessionKey", "teamster.session.patch", []byte(`{"v":1,"sessionId":"x"}`), invalid, nil},
			{"sessionKey of 1025 bytes", "teamster.session.patch", body(repeat("k", 1025), ""), invalid, nil},
			{"sessionKey with NUL", "teamster.session.patch", []byte(`{"v":1,"sessionKey":"a\u0000b"}`), invalid, nil},
			{"sessionId with a control character", "teamster.session.patch", body(hf.locked, `"sessionId":"a\u0007b"`), invalid, nil},
			{"agentHarnessId a.b", "teamster.session.patch", body(hf.locked, `"agentHarnessId":"a.b"`), invalid, nil},
			{"modelSelectionLocked a string", "teamster.session.patch", body(hf.locked, `"modelSelectionLocked":"no"`), invalid, nil},
			{"storePath just under 1 MiB", "teamster.session.patch", padTo(`{"v":1,"sessionKey":"hostile:locked","storePath":"`+repeat("p", bus.MaxBody-100)+`"}`, bus.MaxBody), invalid, nil},
			{"unicode-heavy sessionId of 257 bytes", "teamster.session.patch", body(hf.locked, `"sessionId":"`+repeat("ü", 129)+`"`), invalid, nil},
			{"create over an existing record", "teamster.session.create", body(hf.locked, `"sessionId":"hijacked"`), invalid, nil},
			{"patch of a session with no record", "teamster.session.patch", body("hostile:nobody", `"sessionId":"x"`), invalid, nil},
			{"archive of a session with no record", "teamster.session.archive", body("hostile:nobody", ""), invalid, nil},
			{"reset of a session with no record: ok, nothing to do", "teamster.session.reset", body("hostile:nobody", ""), okReply, nil},
			{"delete of a session with no record: ok, nothing to do", "teamster.session.delete", body("hostile:nobody", ""), okReply, nil},
		} {
			add(g, c.subject, replyPlain, c.name, c.body, c.want, c.header)
		}
	}

	// teamster.source.grant and teamster.source.revoke.
	{
		const g, subj = "teamster.source.grant", bus.SubjectSourceGrant
		generic(g, subj, replyPlain)
		grant := func(id, gen string) []byte { return []byte(fmt.Sprintf(`{"v":1,"id":%q,"generation":%s}`, id, gen)) }
		for _, c := range []struct {
			name string
			body []byte
		}{
			{"id a.b", grant("a.b", "1")},
			{"id *", grant("*", "1")},
			{"id >", grant(">", "1")},
			{"id with a space", grant("a b", "1")},
			{"id unicode", grant("ünï", "1")},
			{"id of 65 characters", grant(repeat("s", 65), "1")},
			{"id empty", grant("", "1")},
			{"id with braces (a Redis hash tag)", grant("a}{b", "1")},
			{"id a number", []byte(`{"v":1,"id":5,"generation":1}`)},
			{"no id", []byte(`{"v":1,"generation":1}`)},
			{"no generation", []byte(`{"v":1,"id":"src-new"}`)},
			{"generation 0", grant("src-new", "0")},
			{"generation -1", grant("src-new", "-1")},
			{"generation 1.5", grant("src-new", "1.5")},
			{"generation a string", grant("src-new", `"2"`)},
			{"generation 1e400", grant("src-new", "1e400")},
			{"generation past int64", grant("src-new", "9223372036854775808")},
			{"the revoked generation again", grant("src-revoked", "1")},
			{"below the current grant", grant("src-granted", "2")},
			{"unicode-heavy id", grant(unicodeText, "1")},
		} {
			add(g, subj, replyPlain, c.name, c.body, invalid, nil)
		}
	}
	{
		const g, subj = "teamster.source.revoke", bus.SubjectSourceRevoke
		generic(g, subj, replyPlain)
		for _, c := range []struct {
			name string
			body []byte
			want outcome
		}{
			{"id a.b", []byte(`{"v":1,"id":"a.b"}`), invalid},
			{"id *", []byte(`{"v":1,"id":"*"}`), invalid},
			{"id >", []byte(`{"v":1,"id":">"}`), invalid},
			{"id with a space", []byte(`{"v":1,"id":"a b"}`), invalid},
			{"id unicode", []byte(`{"v":1,"id":"ünï"}`), invalid},
			{"id of 65 characters", []byte(`{"v":1,"id":"` + repeat("s", 65) + `"}`), invalid},
			{"id empty", []byte(`{"v":1,"id":""}`), invalid},
			{"id with braces (a Redis hash tag)", []byte(`{"v":1,"id":"}{"}`), invalid},
			{"id null", []byte(`{"v":1,"id":null}`), invalid},
			{"id an array", []byte(`{"v":1,"id":["src-granted"]}`), invalid},
			{"no id", []byte(`{"v":1}`), invalid},
			{"unicode-heavy id", []byte(`{"v":1,"id":"` + unicodeText + `"}`), invalid},
			{"the revoked source again: ok, nothing changes", []byte(`{"v":1,"id":"src-revoked"}`), okReply},
		} {
			add(g, subj, replyPlain, c.name, c.body, c.want, nil)
		}
	}

	// teamster.worker.<workerId>.control.
	{
		const g = "teamster.worker.<workerId>.control"
		subj := "teamster.worker.w1.control"
		generic(g, subj, replyControl)
		op := func(v string) []byte { return []byte(`{"v":1,"op":` + v + `}`) }
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"op explode", subj, op(`"explode"`), invalid},
			{"op DRAIN", subj, op(`"DRAIN"`), invalid},
			{"op drain with a trailing space", subj, op(`"drain "`), invalid},
			{"op drain in fullwidth letters", subj, op(`"ｄｒａｉｎ"`), invalid},
			{"op kill", subj, op(`"kill"`), invalid},
			{"op shutdown", subj, op(`"shutdown"`), invalid},
			{"op empty", subj, op(`""`), invalid},
			{"no op", subj, []byte(`{"v":1}`), invalid},
			{"op a number", subj, op(`1`), invalid},
			{"op null", subj, op(`null`), invalid},
			{"op a list", subj, op(`["drain"]`), invalid},
			{"op drain, v 2", subj, []byte(`{"v":2,"op":"drain"}`), invalid},
			{"op unicode-heavy", subj, op(fmt.Sprintf("%q", unicodeText)), invalid},
			{"resume a worker that is not draining", subj, op(`"resume"`), invalid},
			{"status: ok, nothing changes", subj, op(`"status"`), okReply},
			{"a worker that does not exist", "teamster.worker.nobody.control", op(`"drain"`), noResponders},
			{"workerId * (literal)", "teamster.worker.*.control", op(`"drain"`), noResponders},
			{"teamster.worker.> (literal)", "teamster.worker.>", op(`"drain"`), noResponders},
			{"an extra token", subj + ".x", op(`"drain"`), noResponders},
		} {
			add(g, c.subject, replyControl, c.name, c.body, c.want, nil)
		}
	}

	// teamster.harness.<harnessId>.reset (the router's call after a session
	// reset or delete; any worker hosting the harness answers).
	{
		const g = "teamster.harness.<harnessId>.reset"
		subj, _ := bus.HarnessResetSubject("codex")
		generic(g, subj, replyPlain)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
			header        nats.Header
		}{
			{"no sessionKey", subj, []byte(`{"v":1}`), invalid, nil},
			{"sessionKey empty", subj, []byte(`{"v":1,"sessionKey":""}`), invalid, nil},
			{"sessionKey of 1025 bytes", subj, []byte(`{"v":1,"sessionKey":"` + repeat("k", 1025) + `"}`), invalid, nil},
			{"sessionKey with NUL", subj, []byte(`{"v":1,"sessionKey":"a\u0000b"}`), invalid, nil},
			{"sessionKey a number", subj, []byte(`{"v":1,"sessionKey":1}`), invalid, nil},
			{"binding truncated", subj, []byte(`{"v":1,"sessionKey":"hostile:locked","binding":{"thread":`), invalid, nil},
			{"binding 100,000 levels deep", subj, []byte(`{"v":1,"sessionKey":"hostile:locked","binding":` + repeat("[", 100_000) + repeat("]", 100_000) + `}`), invalid, nil},
			{"the locked session: ok, the scripted harness keeps no native state", subj, []byte(`{"v":1,"sessionKey":"hostile:locked","binding":{"thread":"t"}}`), okReply, nil},
			{"the running session, from a delegate: ok (no identity check; see the report)", subj, []byte(`{"v":1,"sessionKey":"hostile:running-v2"}`), okReply, delegateHeader("voice-call")},
			{"a harness nobody hosts", "teamster.harness.ghost.reset", []byte(`{"v":1,"sessionKey":"hostile:locked"}`), noResponders, nil},
			{"harnessId * (literal)", "teamster.harness.*.reset", []byte(`{"v":1,"sessionKey":"hostile:locked"}`), noResponders, nil},
			{"an extra token", subj + ".x", []byte(`{"v":1,"sessionKey":"hostile:locked"}`), noResponders, nil},
		} {
			add(g, c.subject, replyPlain, c.name, c.body, c.want, c.header)
		}
	}
	return cases
}

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
