package compose

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// TestGatewayHasNoJetStream checks, through the JetStream API itself, that
// a gateway can neither read nor change anything there (its results and the
// harnesses come through the routers), and in particular cannot have the
// server answer an allowed call on a fleet subject: it has no allowed call.
func TestGatewayHasNoJetStream(t *testing.T) {
	s := startShipped(t)
	router, gateway := login(t, s, router1), login(t, s, gateway1)
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
	body, err := bus.Encode(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.PublishResultBody(ctx, rjs, teamster.Scope("gateway-1", "a1"), body); err != nil {
		t.Fatal(err)
	}

	gjs, err := jetstream.New(gateway.nc)
	if err != nil {
		t.Fatal(err)
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }
	c0, cancel0 := short()
	defer cancel0()
	if _, err := bus.GetResult(c0, gjs, teamster.Scope("gateway-1", "a1")); err == nil {
		t.Error("the gateway read a durable result from JetStream")
	}
	c1, cancel1 := short()
	defer cancel1()
	if _, err := bus.ReadRegistry(c1, gjs); err == nil {
		t.Error("the gateway read the registry from JetStream")
	}
	// $JS.API.INFO with a reply subject a stream captures: refused, so
	// the server stores no answer as gateway-1's result of a2.
	if err := gateway.nc.PublishRequest("$JS.API.INFO", "teamster.result.gateway-1.a2", nil); err != nil {
		t.Fatal(err)
	}
	c2, cancel2 := short()
	defer cancel2()
	if _, err := gjs.CreateStream(c2, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}}); err == nil {
		t.Error("the gateway created a stream")
	}
	c3, cancel3 := short()
	defer cancel3()
	if err := gjs.DeleteStream(c3, bus.StreamResults); err == nil {
		t.Error("the gateway deleted TEAMSTER_RESULTS")
	}
	c4, cancel4 := short()
	defer cancel4()
	if _, err := gjs.CreateOrUpdateConsumer(c4, bus.StreamResults, jetstream.ConsumerConfig{Durable: "evil"}); err == nil {
		t.Error("the gateway created a consumer")
	}
	if err := gateway.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(gateway.v.all()); n < 6 {
		t.Errorf("the gateway's JetStream calls raised %d permissions violations, want one each (6)", n)
	}
	if _, err := rjs.Stream(ctx, "EVIL"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream EVIL: %v, want not found", err)
	}
	if _, err := rjs.Stream(ctx, bus.StreamResults); err != nil {
		t.Errorf("TEAMSTER_RESULTS: %v", err)
	}
	if _, err := bus.GetResultBody(ctx, rjs, teamster.Scope("gateway-1", "a2")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("gateway-1's result subject of a2 holds something: %v", err)
	}
}
