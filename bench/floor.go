package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/bus"
)

// floor is the physical floor of the hops teamster's flow is made of, each
// measured alone on this machine against the same servers: in a tight loop
// (the goal's floor), and again with the servers left idle before each hop
// (idle), as they are between the hops of one attempt in flight.
type floor struct {
	jsPublish latencies // JetStream publish with ack (file storage, Nats-Msg-Id)
	pullAck   latencies // fetch 1 from a durable pull consumer, then ack
	redis     latencies // EVALSHA of a trivial script
	request   latencies // core NATS request-reply
	idle      *floor    // the same hops, each after floorIdle of sleep
}

// sum is the floor of the flow's hops at percentile p: 1 core request-reply,
// 2 JetStream publishes, 1 pull-and-ack and redisHops Redis round trips.
func (f *floor) sum(p float64, redisHops int) time.Duration {
	return f.request.pct(p) + 2*f.jsPublish.pct(p) + f.pullAck.pct(p) + time.Duration(redisHops)*f.redis.pct(p)
}

// floorIdle is how long the idle variant sleeps before each hop: longer than
// the servers' threads spin before they park, about as long as one server
// waits between two hops of an attempt in flight.
const floorIdle = 500 * time.Microsecond

// floorStream is the bench's own stream, configured like TEAMSTER_ATTEMPTS.
const (
	floorStream   = "BENCH_FLOOR"
	floorSubjects = "benchfloor.>"
)

// timeHop runs op warm+n times and returns the last n durations; with idle
// above zero it sleeps that long, untimed, before each.
func timeHop(n, warm int, idle time.Duration, op func() error) (latencies, error) {
	out := make(latencies, 0, n)
	for i := 0; i < warm+n; i++ {
		if idle > 0 {
			time.Sleep(idle)
		}
		t0 := time.Now()
		if err := op(); err != nil {
			return nil, err
		}
		if i >= warm {
			out = append(out, time.Since(t0))
		}
	}
	return out, nil
}

// measureFloor measures each hop n times after warm iterations, in a tight
// loop and then idle. The payloads are a real encoded attempt, the size
// teamster sends.
func measureFloor(ctx context.Context, srv *servers, n, warm int) (*floor, []Row, error) {
	fl := &floor{idle: &floor{}}
	body, err := bus.Encode(withID(echoAttempt("bench:floor")))
	if err != nil {
		return nil, nil, err
	}

	pub, err := connectNATS(srv.natsURL, "floor-publisher")
	if err != nil {
		return nil, nil, err
	}
	defer pub.Close()
	sub, err := connectNATS(srv.natsURL, "floor-consumer")
	if err != nil {
		return nil, nil, err
	}
	defer sub.Close()
	jsPub, _ := jetstream.New(pub)
	jsSub, _ := jetstream.New(sub)
	cfg := bus.AttemptsStreamConfig(bus.StreamOptions{})
	cfg.Name, cfg.Subjects, cfg.Description = floorStream, []string{floorSubjects}, "teamster bench: floor"
	if _, err := jsPub.CreateOrUpdateStream(ctx, cfg); err != nil {
		return nil, nil, fmt.Errorf("floor stream: %w", err)
	}
	defer func() { _ = jsPub.DeleteStream(context.Background(), floorStream) }()

	// Each hop is timed by both variants; the two publish passes leave the
	// messages the two pull passes take.
	both := func(name string, dst func(*floor) *latencies, op func() error) error {
		for _, v := range []struct {
			f    *floor
			idle time.Duration
		}{{fl, 0}, {fl.idle, floorIdle}} {
			l, err := timeHop(n, warm, v.idle, op)
			if err != nil {
				return fmt.Errorf("floor %s: %w", name, err)
			}
			*dst(v.f) = l
		}
		return nil
	}

	// JetStream publish with ack: what the router does per attempt and the
	// worker per result.
	progress("floor: JetStream publish-with-ack x%d, tight and idle", n)
	err = both("publish", func(f *floor) *latencies { return &f.jsPublish }, func() error {
		msg := &nats.Msg{Subject: "benchfloor.pull", Data: body, Header: nats.Header{}}
		msg.Header.Set(bus.HeaderMsgID, ulid.Make().String())
		_, err := jsPub.PublishMsg(ctx, msg, jetstream.WithExpectStream(floorStream))
		return err
	})
	if err != nil {
		return nil, nil, err
	}

	// Pull and ack one message: a durable pull consumer like
	// harness_<id>, fetch 1, ack (fire and forget, as the worker acks).
	progress("floor: pull-and-ack x%d, tight and idle", n)
	ccfg, err := bus.HarnessConsumerConfig("benchfloor")
	if err != nil {
		return nil, nil, err
	}
	ccfg.FilterSubject = "benchfloor.pull"
	cons, err := jsSub.CreateOrUpdateConsumer(ctx, floorStream, ccfg)
	if err != nil {
		return nil, nil, fmt.Errorf("floor consumer: %w", err)
	}
	err = both("fetch", func(f *floor) *latencies { return &f.pullAck }, func() error {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		got := 0
		for m := range batch.Messages() {
			_ = m.Ack()
			got++
		}
		if got != 1 {
			return fmt.Errorf("got %d messages, want 1 (%v)", got, batch.Error())
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	// Core NATS request-reply: a responder on its own connection, as the
	// router serves teamster.submit.
	progress("floor: core NATS request-reply x%d, tight and idle", n)
	rsub, err := sub.Subscribe("benchfloor.rr", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		return nil, nil, err
	}
	defer rsub.Unsubscribe()
	if err := sub.Flush(); err != nil {
		return nil, nil, err
	}
	err = both("request", func(f *floor) *latencies { return &f.request }, func() error {
		_, err := pub.RequestWithContext(ctx, "benchfloor.rr", body)
		return err
	})
	if err != nil {
		return nil, nil, err
	}

	// One Redis script round trip.
	progress("floor: Redis EVALSHA x%d, tight and idle", n)
	rdb, err := newRedis(srv.redisURL(), nil)
	if err != nil {
		return nil, nil, err
	}
	defer rdb.Close()
	trivial := redis.NewScript(`return 1`)
	if err := trivial.Load(ctx, rdb).Err(); err != nil {
		return nil, nil, err
	}
	err = both("evalsha", func(f *floor) *latencies { return &f.redis }, func() error {
		return trivial.EvalSha(ctx, rdb, []string{"benchfloor"}).Err()
	})
	if err != nil {
		return nil, nil, err
	}

	idle := func(l latencies) string {
		return fmt.Sprintf("; after %s idle: p50 %s, p99 %s", floorIdle, l.pct(50).Round(time.Microsecond), l.pct(99).Round(time.Microsecond))
	}
	rows := []Row{
		Row{Scenario: "floor: JetStream publish-with-ack", Note: fmt.Sprintf("file storage, Nats-Msg-Id, %d-byte attempt body%s", len(body), idle(fl.idle.jsPublish))}.withLatency(fl.jsPublish),
		Row{Scenario: "floor: pull-and-ack one message", Note: "durable pull consumer, Fetch(1) + Ack (not awaited, as the worker acks)" + idle(fl.idle.pullAck)}.withLatency(fl.pullAck),
		Row{Scenario: "floor: Redis script round trip", Note: "EVALSHA of `return 1`, one connection" + idle(fl.idle.redis)}.withLatency(fl.redis),
		Row{Scenario: "floor: core NATS request-reply", Note: fmt.Sprintf("%d-byte body echoed, separate connections%s", len(body), idle(fl.idle.request))}.withLatency(fl.request),
	}
	return fl, rows, nil
}

// withID gives an attempt a fresh id and the router's defaults, as it is
// published on teamster.attempt.<harnessId>.
func withID(a *bus.Attempt) *bus.Attempt {
	a.AttemptID = ulid.Make().String()
	a.ReplyTo = "_INBOX.bench.floor"
	a.ApplyDefaults()
	return a
}
