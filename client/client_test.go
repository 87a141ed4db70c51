package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// waitTimeout bounds every wait of these tests; the things waited for take
// milliseconds (or, for Result's durable check, one 3 s poll).
const waitTimeout = 20 * time.Second

// newClient is a client of its own on a connection of its own to f, so that
// a test counts only its own handles and subscriptions.
func newClient(t *testing.T, f *fleettest.Fleet, opts ...nats.Option) (*client.Client, *nats.Conn) {
	t.Helper()
	opts = append([]nats.Option{nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(f.NATS.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// submit submits a through c; the handle is closed when t ends.
func submit(t *testing.T, c *client.Client, a *bus.Attempt) *client.Handle {
	t.Helper()
	return fleettest.Submit(t, c, a)
}

func waitEvent(t *testing.T, h *client.Handle, typ string) {
	t.Helper()
	fleettest.WaitEvent(t, h, typ)
}

// drain reads events until the channel closes and returns their types.
func drain(t *testing.T, events <-chan bus.Event) []string {
	t.Helper()
	var types []string
	timeout := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return types
			}
			types = append(types, e.Type)
		case <-timeout:
			t.Fatalf("the events channel did not close (got %v)", types)
		}
	}
}

// cancelAtEnd cancels the attempts when the test ends (before its fleet
// stops), so that the workers need not wait for their long sleeps.
func cancelAtEnd(t *testing.T, f *fleettest.Fleet, ids ...string) {
	t.Cleanup(func() {
		for _, id := range ids {
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := f.Client.Result(context.Background(), id); err == nil {
					break // it ended already
				}
				// A cancel that reaches a run as it ends is never answered:
				// bound each one.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := f.Client.Cancel(ctx, id, "the test is over")
				cancel()
				if err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond) // not claimed yet
			}
		}
	})
}

// A handle stops being routed as soon as its result arrives, whether the
// client chose the reply subject (its routing map) or the attempt named one
// (its own subscription), Close or not: events after the result are ignored
// anyway. Before, only Close removed it.
func TestHandleStopsFollowingAtItsResult(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, nc := newClient(t, f)

	h := submit(t, c, fleettest.Attempt("result:mux", "hello"))
	events := h.Events()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if r, err := h.Result(ctx); err != nil || r.Status != teamster.StatusOK {
		t.Fatalf("result %+v %v", r, err)
	}
	if n := client.Followed(c); n != 0 {
		t.Fatalf("the client still follows %d handles after the result arrived", n)
	}
	if types := drain(t, events); len(types) == 0 || types[len(types)-1] != bus.EventResult {
		t.Fatalf("events %v, want the result event last", types)
	}

	subs := nc.NumSubscriptions() // the events subscription
	a := fleettest.Attempt("result:own", "hello")
	a.ReplyTo = "_INBOX.own-reply." + t.Name()
	h2 := submit(t, c, a)
	if got := nc.NumSubscriptions(); got != subs+1 {
		t.Fatalf("%d subscriptions with an attempt on its own reply subject, want %d", got, subs+1)
	}
	if r, err := h2.Result(ctx); err != nil || r.Status != teamster.StatusOK {
		t.Fatalf("result %+v %v", r, err)
	}
	if got, n := nc.NumSubscriptions(), client.Followed(c); got != subs || n != 0 {
		t.Fatalf("after the result: %d subscriptions (want %d), %d handles followed (want 0)", got, subs, n)
	}
}

// When the result event is lost (here: the client's connection is cut while
// the worker sends it, and comes back after), Result finds the result in the
// durable stream; the handle then stops being routed too, and its Events
// channel closes instead of waiting forever for the lost event.
func TestHandleStopsFollowingWhenResultFindsTheDurableResult(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	// The connection reconnects only when told to (ForceReconnect).
	c, nc := newClient(t, f, nats.ReconnectWait(time.Hour), nats.ReconnectJitter(0, 0))
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	// A spy on another connection sees the result event go by.
	spy := f.Connect("spy")
	sent := make(chan struct{}, 1)
	sub, err := spy.Subscribe(client.Inbox(c)+".*", func(m *nats.Msg) {
		var e bus.Event
		if bus.Decode(m.Data, &e) == nil && e.Type == bus.EventResult {
			sent <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	h := submit(t, c, fleettest.Attempt("durable:lost-event", fleettest.Script(`{"sleep":500}`, `{"say":"kept"}`)))
	waitEvent(t, h, bus.EventClaimed)
	if err := f.NATS.Server().DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sent:
	case <-time.After(waitTimeout):
		t.Fatal("the worker sent no result event")
	}
	if nc.IsConnected() {
		t.Fatal("the client's connection is up again: the result event may have reached it")
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	r, err := h.Result(ctx)
	if err != nil || r.Status != teamster.StatusOK || len(r.AssistantTexts) == 0 || r.AssistantTexts[0] != "kept" {
		t.Fatalf("result %+v %v", r, err)
	}
	if n := client.Followed(c); n != 0 {
		t.Fatalf("the client still follows %d handles after Result found the durable result", n)
	}
	if types := drain(t, h.Events()); len(types) != 0 && types[len(types)-1] == bus.EventResult {
		t.Fatalf("events %v: the result event was not lost; the test proves nothing", types)
	}
}

// submitAndDrop submits a long attempt and drops its handle: only the id
// leaves this function.
func submitAndDrop(t *testing.T, c *client.Client, a *bus.Attempt) string {
	t.Helper()
	return submit(t, c, a).AttemptID()
}

// A handle its caller dropped without Close, whose result event never came,
// is not kept by the client for its life: once its attempt can send nothing
// more (its deadlines plus a slack, shortened here), the client forgets it
// and unsubscribes its own reply subject. Before, the routing map (and the
// subscription) held it until Close.
func TestAHandleIsForgottenOnceItsAttemptCanSendNothingMore(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, nc := newClient(t, f)
	t.Cleanup(client.SetFollowFor(500 * time.Millisecond))
	long := fleettest.Script(`{"sleep":60000}`)
	mux := submitAndDrop(t, c, fleettest.Attempt("drop:mux", long))
	a := fleettest.Attempt("drop:own", long)
	a.ReplyTo = "_INBOX.own-reply." + t.Name()
	own := submitAndDrop(t, c, a)
	cancelAtEnd(t, f, mux, own)
	if n := client.Followed(c); n != 2 {
		t.Fatalf("%d handles followed after two submits, want 2", n)
	}
	// The events subscription stays, and so does the one nats.go made for
	// request replies; the one of the attempt's own reply subject goes.
	want := nc.NumSubscriptions() - 1

	deadline := time.Now().Add(waitTimeout)
	for client.Followed(c) != 0 || nc.NumSubscriptions() != want {
		if time.Now().After(deadline) {
			t.Fatalf("the client still follows %d dropped handles (%d subscriptions, want %d)",
				client.Followed(c), nc.NumSubscriptions(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Forgotten because their time was up, not because they finished.
	for _, id := range []string{mux, own} {
		if _, err := c.Result(context.Background(), id); !errors.Is(err, client.ErrNoResult) {
			t.Fatalf("attempt %s has a result already (%v): the test proves nothing", id, err)
		}
	}
}

// Close unsubscribes the events subscription and stops following every
// handle: a Result waiting returns ErrClientClosed at once, the Events
// channels close, a later Submit fails with ErrClientClosed. The connection
// stays open (the client does not own it), and the attempts go on.
func TestCloseStopsTheClient(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, nc := newClient(t, f)
	long := fleettest.Script(`{"sleep":60000}`)
	h := submit(t, c, fleettest.Attempt("close:mux", long))
	a := fleettest.Attempt("close:own", long)
	a.ReplyTo = "_INBOX.own-reply." + t.Name()
	h2 := submit(t, c, a)
	cancelAtEnd(t, f, h.AttemptID(), h2.AttemptID())
	waitEvent(t, h, bus.EventClaimed) // running: Cancel reaches them
	waitEvent(t, h2, bus.EventClaimed)
	events := h.Events()
	// Close ends the events subscription and the attempt's own one; the one
	// nats.go made for request replies is the connection's.
	want := nc.NumSubscriptions() - 2

	type outcome struct {
		r   *bus.Result
		err error
	}
	waiting := make(chan outcome, 1)
	go func() {
		r, err := h.Result(context.Background()) // no deadline: only Close ends it
		waiting <- outcome{r, err}
	}()
	c.Close()
	select {
	case o := <-waiting:
		if !errors.Is(o.err, client.ErrClientClosed) {
			t.Fatalf("Result after Close: %+v %v, want ErrClientClosed", o.r, o.err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Result still waits after Close")
	}
	if _, err := h2.Result(context.Background()); !errors.Is(err, client.ErrClientClosed) {
		t.Fatalf("Result of the other handle after Close: %v, want ErrClientClosed", err)
	}
	drain(t, events)
	drain(t, h2.Events())
	if got, err := c.Submit(context.Background(), fleettest.Attempt("close:after", "hi")); got != nil || !errors.Is(err, client.ErrClientClosed) {
		t.Fatalf("Submit after Close: %v %v, want ErrClientClosed", got, err)
	}
	if n, subs := client.Followed(c), nc.NumSubscriptions(); n != 0 || subs != want {
		t.Fatalf("after Close: %d handles followed, %d subscriptions; want 0 and %d", n, subs, want)
	}
	if !nc.IsConnected() {
		t.Fatal("Close closed the caller's connection")
	}
	c.Close() // idempotent
	h.Close()
	// The attempts go on, and their durable results stay readable.
	if err := f.Client.Cancel(context.Background(), h.AttemptID(), "the test"); err != nil {
		t.Fatalf("cancel the attempt after its client closed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if r, err := c.WaitResult(ctx, h.AttemptID()); err != nil || r.Status != teamster.StatusCancelled {
		t.Fatalf("durable result after Close: %+v %v, want cancelled", r, err)
	}
}

// A failed first events subscription does not stay failed: the next submit
// subscribes again. The failure is a real one: NATS refuses to subscribe a
// subject with a space in it.
func TestEventsSubscriptionIsRetriedAfterAFailure(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, _ := newClient(t, f)
	inbox := client.Inbox(c)
	client.SetInbox(c, "not a subject")
	if h, err := c.Submit(context.Background(), fleettest.Attempt("retry:sub", "hi")); h != nil || !errors.Is(err, nats.ErrBadSubject) {
		t.Fatalf("submit with a refused events subscription: %v %v, want nats.ErrBadSubject", h, err)
	}
	client.SetInbox(c, inbox)
	h := submit(t, c, fleettest.Attempt("retry:sub", "hi"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if r, err := h.Result(ctx); err != nil || r.Status != teamster.StatusOK {
		t.Fatalf("result after the subscription was retried: %+v %v", r, err)
	}
}

// A rejection is a nil handle and a *client.RejectedError that carries the
// router's reply with its selection record and unwraps to the
// *teamster.Error (errors.Is by code, teamster.CodeOf). A fallback is not an
// error. Neither leaves a handle followed.
func TestRejectionIsAnErrorCarryingTheReply(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, _ := newClient(t, f)

	a := fleettest.Attempt("reject:ghost", "hi")
	a.AgentHarnessID = "ghost"
	h, err := c.Submit(context.Background(), a)
	if h != nil {
		t.Fatalf("a rejected submit returned a handle (%+v)", h.Reply)
	}
	var rejected *client.RejectedError
	if !errors.As(err, &rejected) {
		t.Fatalf("rejection %T %v, want a *client.RejectedError", err, err)
	}
	if !errors.Is(err, teamster.ErrHarnessNotRegistered) || teamster.CodeOf(err) != teamster.CodeHarnessNotRegistered {
		t.Fatalf("rejection %v: errors.Is and CodeOf do not see harness_not_registered", err)
	}
	rep := rejected.Reply
	if rep.Status != bus.StatusRejected || rep.Selection == nil || rep.Selection.Runtime != "ghost" || len(rep.Selection.Candidates) == 0 {
		t.Fatalf("reply %+v (selection %+v)", rep, rep.Selection)
	}
	if err.Error() != rep.Error.Error() {
		t.Fatalf("error text %q, want the router's %q", err.Error(), rep.Error.Error())
	}

	fb := fleettest.Attempt("reject:fallback", "hi")
	fb.Provider = "mistral" // no plugin harness supports it: the gateway runs it
	h, err = c.Submit(context.Background(), fb)
	if err != nil || h == nil || h.Reply.Status != bus.StatusFallback {
		t.Fatalf("fallback: %v %v, want a handle with the fallback reply and no error", h, err)
	}
	if n := client.Followed(c); n != 0 {
		t.Fatalf("the client follows %d handles after a rejection and a fallback", n)
	}
}
