package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/backendtest"
	"github.com/teamster-fleet/teamster/internal/testenv"
	"github.com/teamster-fleet/teamster/leases"
)

// startRouter runs a router on a private NATS and redis-server; it stops
// when the test ends.
func startRouter(t *testing.T) *backendtest.Backends {
	t.Helper()
	b := backendtest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.NewRedis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	r, err := New(Params{NATS: b.NC, Redis: rdb, Logger: b.Log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return b
}

// An inject the router cannot encode for its run still gets a typed reply
// (internal), instead of none: the requester would otherwise wait out its
// whole timeout. No request that decoding accepts fails to encode, so the
// test makes the encoder fail (encodeInject).
func TestInjectThatCannotBeForwardedIsAnswered(t *testing.T) {
	encode := encodeInject
	encodeInject = func(*bus.InjectRequest) ([]byte, error) {
		return nil, errors.New("encoding failed (the test's)")
	}
	t.Cleanup(func() { encodeInject = encode })
	b := backendtest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.NewRedis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	r, err := New(Params{NATS: b.NC, Redis: rdb, Logger: b.Log})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	// The session has a running turn, a1 on w1 (its lease, as a worker's
	// claim writes it), so the router gets as far as forwarding.
	lease := "teamster:{" + leases.Tag("s1") + "}:lease"
	if err := rdb.HSet(context.Background(), lease, "holder", "w1", "attempt", "a1", "fence", "e:1").Err(); err != nil {
		t.Fatal(err)
	}

	body, err := bus.Encode(&bus.InjectRequest{V: bus.Version, SessionKey: "s1", Text: "steer", AuthorityKind: bus.AuthorityRun})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := b.NC.RequestWithContext(ctx, bus.SubjectInject, body)
	if err != nil {
		t.Fatalf("no reply to an inject the router could not forward: %v", err)
	}
	var rep bus.InjectReply
	if err := bus.Decode(m.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != bus.StatusRejected || rep.AttemptID != "a1" || !errors.Is(rep.Error, teamster.ErrInternal) {
		t.Fatalf("reply %+v (error %v), want rejected internal for a1", rep, rep.Error)
	}
}
