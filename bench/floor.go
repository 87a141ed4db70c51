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
// measured alone on this machine against the same servers.
type floor struct {
	jsPublish latencies // JetStream publish with ack (file storage, Nats-Msg-Id)
	pullAck   latencies // fetch 1 from a durable pull consumer, then ack
	redis     latencies // EVALSHA of a trivial script
	request   latencies // core NATS request-reply
}

// floorStream is the bench's own stream, configured like TEAMSTER_ATTEMPTS.
const (
	floorStream   = "BENCH_FLOOR"
	floorSubjects = "benchfloor.>"
)

// measureFloor measures each hop n times after warm iterations. The
// payloads are a real encoded attempt, the size teamster sends.
func measureFloor(ctx context.Context, srv *servers, n, warm int) (*floor, []Row, error) {
	fl := &floor{}
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

	// JetStream publish with ack: what the router does per attempt and the
	// worker per result.
	progress("floor: JetStream publish-with-ack x%d", n)
	for i := 0; i < warm+n; i++ {
		msg := &nats.Msg{Subject: "benchfloor.pull", Data: body, Header: nats.Header{}}
		msg.Header.Set(bus.HeaderMsgID, ulid.Make().String())
		t0 := time.Now()
		if _, err := jsPub.PublishMsg(ctx, msg, jetstream.WithExpectStream(floorStream)); err != nil {
			return nil, nil, fmt.Errorf("floor publish: %w", err)
		}
		if i >= warm {
			fl.jsPublish = append(fl.jsPublish, time.Since(t0))
		}
	}

	// Pull and ack one message: a durable pull consumer like
	// harness_<id>, fetch 1, ack (fire and forget, as the worker acks).
	progress("floor: pull-and-ack x%d", n)
	ccfg, err := bus.HarnessConsumerConfig("benchfloor")
	if err != nil {
		return nil, nil, err
	}
	ccfg.FilterSubject = "benchfloor.pull"
	cons, err := jsSub.CreateOrUpdateConsumer(ctx, floorStream, ccfg)
	if err != nil {
		return nil, nil, fmt.Errorf("floor consumer: %w", err)
	}
	for i := 0; i < warm+n; i++ {
		t0 := time.Now()
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, nil, fmt.Errorf("floor fetch: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			_ = m.Ack()
			got++
		}
		d := time.Since(t0)
		if got != 1 {
			return nil, nil, fmt.Errorf("floor fetch: got %d messages, want 1 (%v)", got, batch.Error())
		}
		if i >= warm {
			fl.pullAck = append(fl.pullAck, d)
		}
	}

	// Core NATS request-reply: a responder on its own connection, as the
	// router serves teamster.submit.
	progress("floor: core NATS request-reply x%d", n)
	rsub, err := sub.Subscribe("benchfloor.rr", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		return nil, nil, err
	}
	defer rsub.Unsubscribe()
	if err := sub.Flush(); err != nil {
		return nil, nil, err
	}
	for i := 0; i < warm+n; i++ {
		t0 := time.Now()
		if _, err := pub.RequestWithContext(ctx, "benchfloor.rr", body); err != nil {
			return nil, nil, fmt.Errorf("floor request: %w", err)
		}
		if i >= warm {
			fl.request = append(fl.request, time.Since(t0))
		}
	}

	// One Redis script round trip.
	progress("floor: Redis EVALSHA x%d", n)
	rdb, err := newRedis(srv.redisURL(), nil)
	if err != nil {
		return nil, nil, err
	}
	defer rdb.Close()
	trivial := redis.NewScript(`return 1`)
	if err := trivial.Load(ctx, rdb).Err(); err != nil {
		return nil, nil, err
	}
	for i := 0; i < warm+n; i++ {
		t0 := time.Now()
		if err := trivial.EvalSha(ctx, rdb, []string{"benchfloor"}).Err(); err != nil {
			return nil, nil, fmt.Errorf("floor evalsha: %w", err)
		}
		if i >= warm {
			fl.redis = append(fl.redis, time.Since(t0))
		}
	}

	rows := []Row{
		Row{Scenario: "floor: JetStream publish-with-ack", Note: fmt.Sprintf("file storage, Nats-Msg-Id, %d-byte attempt body", len(body))}.withLatency(fl.jsPublish),
		Row{Scenario: "floor: pull-and-ack one message", Note: "durable pull consumer, Fetch(1) + Ack (not awaited, as the worker acks)"}.withLatency(fl.pullAck),
		Row{Scenario: "floor: Redis script round trip", Note: "EVALSHA of `return 1`, one connection"}.withLatency(fl.redis),
		Row{Scenario: "floor: core NATS request-reply", Note: fmt.Sprintf("%d-byte body echoed, separate connections", len(body))}.withLatency(fl.request),
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
