package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// waitOut waits until cond holds (a liveness bound, not a timing
// assertion).
func waitOut(t *testing.T, what string, cond func() bool) {
	t.Helper()
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(5*time.Millisecond),
		backoff.WithMaxInterval(100*time.Millisecond), backoff.WithMaxElapsedTime(waitTimeout))
	if err := backoff.Retry(func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("not yet: %s", what)
	}, bo); err != nil {
		t.Fatal(err)
	}
}

// runs counts the ledger's starts of attempt id.
func runs(f *fleettest.Fleet, id string) int {
	n := 0
	for _, e := range f.Ledger.Entries() {
		if e.Event == scripted.EventStart && e.Attempt == id {
			n++
		}
	}
	return n
}

// stopRouter stops f's router and waits until no router serves
// teamster.submit (a draining subscription still takes requests until the
// server has its unsubscribe). The probe is an empty body, which a router
// refuses without changing anything.
func stopRouter(t *testing.T, f *fleettest.Fleet) {
	t.Helper()
	f.Router.Stop()
	probe := f.Connect("probe")
	waitOut(t, "no router serving", func() bool {
		_, err := probe.Request(bus.SubjectSubmit, nil, time.Second)
		return errors.Is(err, nats.ErrNoResponders)
	})
	probe.Close()
}

type submitOutcome struct {
	h   *client.Handle
	err error
}

func submitAsync(c *client.Client, ctx context.Context, a *bus.Attempt) <-chan submitOutcome {
	out := make(chan submitOutcome, 1)
	go func() {
		h, err := c.Submit(ctx, a)
		out <- submitOutcome{h, err}
	}()
	return out
}

// A submit sent while no router serves teamster.submit (routers restarting,
// or reconnecting after a NATS node died) is sent again until one does,
// within the caller's context, and is accepted then. An attempt submitted
// without an id gets one from the client (a ULID), so every try is the same
// attempt.
func TestSubmitWaitsForARouter(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, nc := newClient(t, f)
	stopRouter(t, f)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sent := nc.Stats().OutMsgs
	out := submitAsync(c, ctx, fleettest.Attempt("s1", "hello"))
	// Two tries went out, and nobody answered them.
	waitOut(t, "two submit tries", func() bool { return nc.Stats().OutMsgs >= sent+2 })
	select {
	case o := <-out:
		t.Fatalf("the submit ended without a router: %v", o.err)
	default:
	}
	f.StartRouter()
	o := <-out
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.h.Close()
	if o.h.Reply.Status != bus.StatusAccepted {
		t.Fatalf("reply %+v, want accepted", o.h.Reply)
	}
	if _, err := ulid.ParseStrict(o.h.AttemptID()); err != nil {
		t.Fatalf("attempt id %q is no ULID: %v", o.h.AttemptID(), err)
	}
	if r := fleettest.Result(t, o.h); r.Status != teamster.StatusOK || r.AttemptID != o.h.AttemptID() {
		t.Fatalf("result %+v", r)
	}
	if n := runs(f, o.h.AttemptID()); n != 1 {
		t.Fatalf("the attempt ran %d times", n)
	}

	// An id the caller gave is kept.
	a := fleettest.Attempt("s2", "hello")
	a.AttemptID = "mine-1"
	h := submit(t, c, a)
	if h.AttemptID() != "mine-1" {
		t.Fatalf("attempt id %q, want the caller's", h.AttemptID())
	}
}

// With no router at all, a submit stops trying when the caller's context
// ends: internal, no router is serving teamster.submit, after more than one
// try.
func TestSubmitWithoutRouterGivesUpWithTheContext(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, nc := newClient(t, f)
	stopRouter(t, f)
	sent := nc.Stats().OutMsgs
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	h, err := c.Submit(ctx, fleettest.Attempt("s1", "hello"))
	if err == nil {
		h.Close()
		t.Fatal("accepted without a router")
	}
	if teamster.CodeOf(err) != teamster.CodeInternal {
		t.Fatalf("error %v, want internal", err)
	}
	if n := nc.Stats().OutMsgs - sent; n < 2 {
		t.Fatalf("%d tries, want more than one", n)
	}
	if got := client.Followed(c); got != 0 {
		t.Fatalf("the client still follows %d handles", got)
	}
}

// A submit whose reply is lost (here: a router took the request and
// accepted the attempt, and its reply never reached the client) is sent
// again with the same attempt id after the wait for a reply; the router
// answers it from the attempt's record, with the very reply it first gave,
// and the attempt runs once, its result arriving at the handle.
func TestSubmitWhoseReplyIsLostIsSentAgain(t *testing.T) {
	defer client.SetSubmitTry(time.Second)()
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	c, _ := newClient(t, f)
	stopRouter(t, f)

	// The request's taker: subscribed as a router would be, it takes the
	// first try and hands it on to a real router with a reply subject of
	// its own, so the router's answer never reaches the client.
	taker := f.Connect("taker")
	sub, err := taker.QueueSubscribeSync(bus.SubjectSubmit, bus.QueueRouters)
	if err != nil {
		t.Fatal(err)
	}
	if err := taker.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	out := submitAsync(c, ctx, fleettest.Attempt("s1", "hello"))
	first, err := sub.NextMsg(waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	f.StartRouter()
	// The new router's subscription reaches the server a moment after
	// StartRouter returns: until then the request has no responders.
	var lostReply *nats.Msg
	deadline := time.Now().Add(waitTimeout)
	for {
		lostReply, err = taker.RequestMsg(&nats.Msg{Subject: bus.SubjectSubmit, Data: first.Data}, waitTimeout)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	var lost bus.SubmitReply
	if err := bus.Decode(lostReply.Data, &lost); err != nil {
		t.Fatal(err)
	}
	if lost.Status != bus.StatusAccepted {
		t.Fatalf("the lost reply is %+v, want accepted", lost)
	}

	o := <-out
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.h.Close()
	if o.h.AttemptID() != lost.AttemptID || o.h.Reply.Status != bus.StatusAccepted || o.h.Reply.HarnessID != lost.HarnessID {
		t.Fatalf("the client's reply %+v, the lost one %+v", o.h.Reply, lost)
	}
	got, err := bus.Encode(o.h.Reply)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bus.Encode(&lost)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the resubmit's reply\n%s\nis not the first reply\n%s", got, want)
	}
	if r := fleettest.Result(t, o.h); r.Status != teamster.StatusOK || r.AttemptID != lost.AttemptID {
		t.Fatalf("result %+v", r)
	}
	if n := runs(f, lost.AttemptID); n != 1 {
		t.Fatalf("the attempt ran %d times", n)
	}
}
