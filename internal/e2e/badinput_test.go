package e2e

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
)

// Bad input on teamster.submit gets rejected with its code; nothing is
// published or written; the router keeps serving.
func TestBadSubmitsChangeNothing(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	nc := f.Connect("bad-client")
	valid := `"v":1,"agentId":"main","sessionKey":"s","sessionId":"s1","provider":"openai","modelId":"gpt-5","prompt":"hi","modelProvider":{"runtimePolicy":{"compatibleIds":["codex"]}}`
	cases := []struct {
		name string
		body []byte
		code teamster.Code
	}{
		{"malformed JSON", []byte(`{"v":1,`), teamster.CodeInvalidRequest},
		{"not an object", []byte(`[1,2,3]`), teamster.CodeInvalidRequest},
		{"missing sessionKey", []byte(`{"v":1,"agentId":"main","sessionId":"s1","provider":"openai","modelId":"m","prompt":"x"}`), teamster.CodeInvalidRequest},
		{"wrong type: timeoutMs string", []byte(`{` + valid + `,"timeoutMs":"10"}`), teamster.CodeInvalidRequest},
		{"wrong type: prompt object", []byte(`{"v":1,"agentId":"main","sessionKey":"s","sessionId":"s1","provider":"openai","modelId":"m","prompt":{}}`), teamster.CodeInvalidRequest},
		{"body over 1 MiB", []byte(`{` + valid + `,"pad":"` + strings.Repeat("x", bus.MaxBody) + `"}`), teamster.CodePayloadTooLarge},
		{"invalid attemptId a.b", []byte(`{` + valid + `,"attemptId":"a.b"}`), teamster.CodeInvalidRequest},
		{"invalid attemptId *", []byte(`{` + valid + `,"attemptId":"*"}`), teamster.CodeInvalidRequest},
		{"invalid attemptId >", []byte(`{` + valid + `,"attemptId":">"}`), teamster.CodeInvalidRequest},
		{"invalid attemptId space", []byte(`{` + valid + `,"attemptId":"a b"}`), teamster.CodeInvalidRequest},
		{"invalid agentHarnessId", []byte(`{` + valid + `,"agentHarnessId":"co.dex"}`), teamster.CodeInvalidRequest},
		{"timeoutMs out of range", []byte(`{` + valid + `,"timeoutMs":86400001}`), teamster.CodeInvalidRequest},
		{"queueTimeoutMs negative", []byte(`{` + valid + `,"queueTimeoutMs":-1}`), teamster.CodeInvalidRequest},
		{"settlementTimeoutMs out of range", []byte(`{` + valid + `,"settlementTimeoutMs":3600001}`), teamster.CodeInvalidRequest},
		{"delegate field", []byte(`{` + valid + `,"delegate":"voice-call"}`), teamster.CodeInvalidRequest},
		{"delegate null", []byte(`{` + valid + `,"delegate":null}`), teamster.CodeInvalidRequest},
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg, err := nc.Request(bus.SubjectSubmit, c.body, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var rep bus.SubmitReply
			if err := bus.Decode(msg.Data, &rep); err != nil {
				t.Fatalf("reply does not decode: %v (%s)", err, msg.Data)
			}
			if rep.Status != bus.StatusRejected || !errors.Is(rep.Err(), &teamster.Error{Code: c.code}) {
				t.Fatalf("reply %+v, want rejected with %s", rep, c.code)
			}
			if bytes.Contains(msg.Data, []byte("xxxxxxxxxx")) {
				t.Fatal("the reply echoes the body")
			}
		})
	}
	// Nothing was published or written.
	s, err := js.Stream(t.Context(), bus.StreamAttempts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil || info.State.Msgs != 0 || info.State.LastSeq != 0 {
		t.Fatalf("attempts stream after bad input: %+v (%v)", info.State, err)
	}
	// The routers' node markers (one per hash slot, written when a router
	// starts) are not the requests' doing.
	var written []string
	iter := f.RDB.Scan(t.Context(), 0, "*", 1000).Iterator()
	for iter.Next(t.Context()) {
		if !leases.IsNodeKey(iter.Val()) {
			written = append(written, iter.Val())
		}
	}
	if err := iter.Err(); err != nil || len(written) != 0 {
		t.Fatalf("redis holds %d keys after bad input (%v): %q", len(written), err, written)
	}
	// The router keeps serving.
	h := submit(t, f, fleettest.Attempt("sess-after", "still here"))
	if r := result(t, h); r.Status != teamster.StatusOK {
		t.Fatalf("valid submit after bad input: %+v", r)
	}
}

// A rejected explicit runtime publishes nothing and says why, with the
// selection record.
func TestRejectedRuntimePublishesNothing(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	a := fleettest.Attempt("sess-ghost", "hi")
	a.AgentHarnessID = "ghost"
	h, err := f.Client.Submit(t.Context(), a)
	var rejected *client.RejectedError
	if !errors.Is(err, teamster.ErrHarnessNotRegistered) || h != nil || !errors.As(err, &rejected) {
		t.Fatalf("submit pinned to an unregistered harness: %v %v", h, err)
	}
	if sel := rejected.Reply.Selection; sel == nil || sel.Runtime != "ghost" || sel.RuntimeSource != "pin" || len(sel.Candidates) == 0 {
		t.Fatalf("selection record %+v", sel)
	}
	b := fleettest.Attempt("sess-ghost", "hi")
	b.AgentHarnessID = "codex"
	b.ModelProvider = nil // no route policy: codex does not support it
	if _, err := f.Client.Submit(t.Context(), b); !errors.Is(err, teamster.ErrHarnessUnsupportedRoute) {
		t.Fatalf("pinned harness without route support: %v", err)
	}
	js, _ := jetstream.New(f.Connect("inspect"))
	s, _ := js.Stream(t.Context(), bus.StreamAttempts)
	info, err := s.Info(t.Context())
	if err != nil || info.State.LastSeq != 0 {
		t.Fatalf("stream after rejected runtimes: %+v (%v)", info.State, err)
	}
	// auto with no supporting harness falls back to the gateway.
	c := fleettest.Attempt("sess-fallback", "hi")
	c.Provider = "mistral"
	fb, err := f.Client.Submit(t.Context(), c)
	if err != nil {
		t.Fatalf("fallback: %v", err) // a rejection's error carries the reply
	}
	if fb.Reply.Status != bus.StatusFallback || fb.Reply.Selection.SelectedReason != "auto_openclaw" {
		t.Fatalf("fallback: %+v", fb.Reply)
	}
}

func fleettestClient(t *testing.T, nc *nats.Conn) *client.Client {
	t.Helper()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
