package bus_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

func connect(t *testing.T) (*testenv.NATS, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := testenv.NewNATS(t)
	nc, js := srv.JetStream(t)
	return srv, nc, js
}

// Streams, bucket and consumers are created idempotently: set-up run again (as
// every router and worker does at start-up) leaves one of each, configured as
// the contract says.
func TestSetupIsIdempotent(t *testing.T) {
	_, _, js := connect(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
			t.Fatalf("setup run %d: %v", i+1, err)
		}
		if _, err := bus.EnsureHarnessConsumer(ctx, js, "codex"); err != nil {
			t.Fatalf("consumer run %d: %v", i+1, err)
		}
	}
	var names []string
	for n := range js.StreamNames(ctx).Name() {
		names = append(names, n)
	}
	// The KV buckets are the streams KV_TEAMSTER_WORKERS and
	// KV_TEAMSTER_ROUTERS, the object store OBJ_TEAMSTER_NATIVE_STATE.
	slices.Sort(names)
	if want := []string{"KV_" + bus.BucketRouters, "KV_" + bus.BucketWorkers, "OBJ_" + bus.BucketNativeState, bus.StreamAttempts, bus.StreamResults}; !slices.Equal(names, want) {
		t.Fatalf("streams %v, want %v", names, want)
	}
	att, err := js.Stream(ctx, bus.StreamAttempts)
	if err != nil {
		t.Fatal(err)
	}
	ai := att.CachedInfo()
	if ai.Config.Retention != jetstream.WorkQueuePolicy || ai.Config.Storage != jetstream.FileStorage || ai.Config.Duplicates != bus.DuplicateWindow {
		t.Fatalf("attempts stream config %+v", ai.Config)
	}
	res, err := js.Stream(ctx, bus.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	rc := res.CachedInfo().Config
	if rc.MaxMsgsPerSubject != 1 || rc.Discard != jetstream.DiscardNew || !rc.DiscardNewPerSubject || rc.MaxAge != 24*time.Hour {
		t.Fatalf("results stream config %+v", rc)
	}
	for _, bucket := range []string{bus.BucketWorkers, bus.BucketRouters} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil || st.TTL() != bus.WorkersTTL {
			t.Fatalf("bucket %s TTL %v (%v), want %s", bucket, st.TTL(), err, bus.WorkersTTL)
		}
	}
	var consumers []string
	for n := range att.ConsumerNames(ctx).Name() {
		consumers = append(consumers, n)
	}
	if len(consumers) != 1 || consumers[0] != "harness_codex" {
		t.Fatalf("consumers %v, want [harness_codex]", consumers)
	}
	c, err := att.Consumer(ctx, "harness_codex")
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	if cc.MaxDeliver != -1 || cc.AckPolicy != jetstream.AckExplicitPolicy || cc.FilterSubject != "teamster.attempt.codex" {
		t.Fatalf("consumer config %+v", cc)
	}
}

// Lookup and HarnessConsumer (what a worker runs) create nothing: before a
// router's Setup they say ErrNotSetUp, a transient error the worker waits
// out, and afterwards they find what Setup and EnsureHarnessConsumer made.
func TestWorkerLookupCreatesNothing(t *testing.T) {
	_, _, js := connect(t)
	ctx := context.Background()
	if _, err := bus.Lookup(ctx, js); !errors.Is(err, bus.ErrNotSetUp) || !bus.Transient(err) {
		t.Fatalf("lookup before setup: %v, want a transient ErrNotSetUp", err)
	}
	if names := streamNames(t, js); len(names) != 0 {
		t.Fatalf("lookup created streams %v", names)
	}
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Lookup(ctx, js); err != nil {
		t.Fatalf("lookup after setup: %v", err)
	}
	if _, err := bus.HarnessConsumer(ctx, js, "codex"); !errors.Is(err, bus.ErrNotSetUp) {
		t.Fatalf("consumer before a router made it: %v, want ErrNotSetUp", err)
	}
	if _, err := bus.EnsureHarnessConsumer(ctx, js, "codex"); err != nil {
		t.Fatal(err)
	}
	c, err := bus.HarnessConsumer(ctx, js, "codex")
	if err != nil {
		t.Fatal(err)
	}
	if name := c.CachedInfo().Name; name != "harness_codex" {
		t.Fatalf("consumer %q", name)
	}
}

func streamNames(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var names []string
	l := js.StreamNames(context.Background())
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// The same attempt id published twice within the duplicate window is stored
// once.
func TestSameAttemptIDIsStoredOnce(t *testing.T) {
	_, _, js := connect(t)
	ctx := context.Background()
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	a := &bus.Attempt{V: 1, AttemptID: "01J00000000000000000000001", AgentID: "main", SessionKey: "s", SessionID: "s1",
		Provider: "openai", ModelID: "gpt-5", Prompt: "hi"}
	a.ApplyDefaults()
	publish := func() (bool, error) {
		body, err := bus.Encode(a)
		if err != nil {
			return false, err
		}
		return bus.PublishAttemptBody(ctx, js, "codex", a.AttemptID, body, nil)
	}
	dup, err := publish()
	if err != nil || dup {
		t.Fatalf("first publish: dup=%v err=%v", dup, err)
	}
	a.Prompt = "a resubmit with other content is still the same attempt"
	dup, err = publish()
	if err != nil || !dup {
		t.Fatalf("second publish: dup=%v err=%v, want a duplicate", dup, err)
	}
	s, _ := js.Stream(ctx, bus.StreamAttempts)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
	m, err := s.GetMsg(ctx, info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bus.DecodeAttempt(m.Data)
	if err != nil || got.Prompt != "hi" {
		t.Fatalf("stored attempt %+v (%v), want the first one", got, err)
	}
}

// The results stream keeps the first result of an attempt: the same bytes
// again are accepted as already stored (a retry), a different result is
// refused with ErrResultExists, also past the duplicate window (a different
// message id).
func TestFirstResultStays(t *testing.T) {
	_, nc, js := connect(t)
	ctx := context.Background()
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	first := &bus.Result{V: 1, AttemptID: "a1", Status: teamster.StatusOK, WorkerID: "w1", AssistantTexts: []string{"hello"}}
	if err := bus.PublishResult(ctx, js, first); err != nil {
		t.Fatalf("first result: %v", err)
	}
	if err := bus.PublishResult(ctx, js, first); err != nil {
		t.Fatalf("the same result again: %v, want accepted as stored", err)
	}
	second := bus.NewErrorResult("a1", teamster.Errorf(teamster.CodeWorkerLost, "lost").WithSideEffects(teamster.SideEffectsPossible))
	if err := bus.PublishResult(ctx, js, second); !errors.Is(err, bus.ErrResultExists) {
		t.Fatalf("a different result: %v, want ErrResultExists", err)
	}
	// A writer without the message id (past the duplicate window) is refused
	// by the one-per-subject limit.
	body, _ := bus.Encode(second)
	if _, err := js.Publish(ctx, "teamster.result.a1", body); err == nil {
		t.Fatal("a second message on a result subject was stored")
	}
	got, err := bus.GetResult(ctx, js, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != teamster.StatusOK || got.WorkerID != "w1" {
		t.Fatalf("stored result %+v, want the first", got)
	}
	if _, err := bus.GetResult(ctx, js, "nope"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("missing result: %v, want ErrMsgNotFound", err)
	}
	_ = nc
}

// The results stream's refusal of a second message on an attempt's subject
// is recognised by its API error code (nats-server's JSStreamStoreFailedF),
// whatever its text; other errors, of the API or not, are not.
func TestPerSubjectLimitIsRecognisedByItsCode(t *testing.T) {
	_, _, js := connect(t)
	ctx := context.Background()
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	subj, err := bus.ResultSubject("a1")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(id string) error {
		m := &nats.Msg{Subject: subj, Data: []byte(`{}`), Header: nats.Header{}}
		m.Header.Set(bus.HeaderMsgID, id) // another id each time: no de-duplication
		_, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(bus.StreamResults))
		return err
	}
	if err := publish("first"); err != nil {
		t.Fatal(err)
	}
	refused := publish("second")
	var apiErr *jetstream.APIError
	if !errors.As(refused, &apiErr) {
		t.Fatalf("a second message on %s: %v, want the server's refusal", subj, refused)
	}
	if !bus.IsPerSubjectLimit(refused) {
		t.Fatalf("the server's refusal %v (code %d) is not recognised", refused, apiErr.ErrorCode)
	}
	// The code decides, not the text.
	reworded := *apiErr
	reworded.Description = "the subject is full"
	if !bus.IsPerSubjectLimit(&reworded) {
		t.Fatalf("the refusal reworded (%v) is not recognised", &reworded)
	}

	// A real API error of another kind: the stream is not the one expected.
	m := &nats.Msg{Subject: subj, Data: []byte(`{}`), Header: nats.Header{}}
	m.Header.Set(bus.HeaderMsgID, "third")
	_, wrongStream := js.PublishMsg(ctx, m, jetstream.WithExpectStream(bus.StreamAttempts))
	if !errors.As(wrongStream, &apiErr) {
		t.Fatalf("publish expecting another stream: %v, want an API error", wrongStream)
	}
	sameText := *apiErr
	sameText.Description = refused.Error() // the per-subject text, another code
	for _, err := range []error{wrongStream, &sameText, context.DeadlineExceeded, errors.New("maximum messages per subject exceeded")} {
		if bus.IsPerSubjectLimit(err) {
			t.Errorf("%v (%T) taken for the per-subject limit", err, err)
		}
	}
}

// The embedded server keeps its streams across a restart on the same store.
func TestEmbeddedServerKeepsStreamsAcrossRestart(t *testing.T) {
	srv, nc, js := connect(t)
	ctx := context.Background()
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	r := &bus.Result{V: 1, AttemptID: "kept", Status: teamster.StatusOK, AssistantTexts: []string{}}
	if err := bus.PublishResult(ctx, js, r); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var got *bus.Result
	var err error
	for time.Now().Before(deadline) {
		if got, err = bus.GetResult(ctx, js, "kept"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || got.AttemptID != "kept" {
		t.Fatalf("result after restart: %+v %v", got, err)
	}
}
