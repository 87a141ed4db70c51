package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/bus"
)

// The flow floor is what docs/PROTOCOL.md's flow of one attempt costs on this
// machine when nothing else is done: its messages, sent by a router and two
// workers made of nothing else. No envelope is decoded or validated, nothing
// is selected, leased, logged or counted; the payloads are the bytes of one
// real echo attempt's envelopes, replayed. Unlike the hop floors (floor.go),
// which time each hop alone in a tight loop, it chains the hops across
// connections and goroutines as any implementation of the contract must.
// Without Redis it bounds every implementation; with Redis sent alone it is
// what unbatched round trips cost, and with Redis batched what a store that
// batches them, as teamster's does, can reach.
//
// One flow, at the contract's points:
//   - the client requests benchflow.submit.<tok>.<id> with the attempt body;
//   - the router publishes it to the BENCH_FLOW_ATTEMPTS stream (configured
//     like TEAMSTER_ATTEMPTS: work queue, file storage, Nats-Msg-Id) and
//     replies with the submit reply;
//   - a worker pulls it from the shared durable consumer, acks it, subscribes
//     the run's inject and cancel subjects (two literal SUBs, as teamster's
//     worker does, and their UNSUBs at the end), publishes claimed and the
//     echo turn's partial to the client, publishes the result to the
//     BENCH_FLOW_RESULTS stream (configured like TEAMSTER_RESULTS) with its
//     ack, and sends the result event;
//   - with Redis, the router makes one script round trip before it publishes
//     (accept) and the worker three (claim, finish, mark published), each an
//     EVALSHA of `return 1`: the round trips of teamster's path, without its
//     scripts' work. Each is sent alone, or, at many in flight, through
//     go-redis's autopipeliner, which batches what concurrent callers send
//     as teamster's store does (leases/batch.go).

const (
	flowStreamAttempts = "BENCH_FLOW_ATTEMPTS"
	flowStreamResults  = "BENCH_FLOW_RESULTS"
	flowInbox          = "_INBOX.benchflow"
)

// flowPayloads are the envelopes of one real echo attempt.
type flowPayloads struct {
	attempt, reply, result []byte
	events                 [][]byte // claimed, partial, result: what the worker sends
}

// samplePayloads runs one echo attempt through the fleet and keeps the
// bytes of its envelopes.
func samplePayloads(ctx context.Context, f *fleet) (*flowPayloads, error) {
	attempt, err := bus.Encode(withID(echoAttempt("bench:flowfloor")))
	if err != nil {
		return nil, err
	}
	h, err := f.client.Submit(ctx, echoAttempt("bench:flowfloor"))
	if err != nil {
		return nil, err
	}
	defer h.Close()
	res, err := h.Result(ctx)
	if err != nil {
		return nil, err
	}
	p := &flowPayloads{attempt: attempt}
	if p.reply, err = bus.Encode(h.Reply); err != nil {
		return nil, err
	}
	if p.result, err = bus.Encode(res); err != nil {
		return nil, err
	}
	for e := range h.Events() {
		b, err := bus.Encode(&e)
		if err != nil {
			return nil, err
		}
		p.events = append(p.events, b)
	}
	if len(p.events) == 0 || !strings.Contains(string(p.events[len(p.events)-1]), `"type":"result"`) {
		return nil, fmt.Errorf("flow floor: the sample attempt's last event is not its result (%d events)", len(p.events))
	}
	return p, nil
}

// flowFloorRedisTrips is how many Redis round trips the flow floor makes
// per flow: accept (the router's), claim, finish and mark published (the
// worker's).
const flowFloorRedisTrips = 4

// flowRedis is how the flow floor makes its Redis round trips.
type flowRedis int

const (
	flowNoRedis      flowRedis = iota // NATS messages only
	flowRedisAlone                    // each round trip sent alone
	flowRedisBatched                  // through go-redis's autopipeliner, which batches concurrent calls
)

func (r flowRedis) String() string {
	switch r {
	case flowRedisAlone:
		return fmt.Sprintf("NATS messages + %d Redis round trips", flowFloorRedisTrips)
	case flowRedisBatched:
		return fmt.Sprintf("NATS messages + %d Redis round trips, batched", flowFloorRedisTrips)
	}
	return "NATS messages only"
}

// measureFlowFloor runs the flow floor with sessions flows in flight and
// returns its row.
func measureFlowFloor(ctx context.Context, f *fleet, p *flowPayloads, sessions int, mode flowRedis, warm, window time.Duration) (Row, error) {
	what := mode.String()
	progress("flow floor (%s): %d flows in flight, %s warm-up + %s window", what, sessions, warm, window)
	js, err := jetstream.New(f.client.Conn())
	if err != nil {
		return Row{}, err
	}
	acfg := bus.AttemptsStreamConfig(bus.StreamOptions{})
	acfg.Name, acfg.Subjects, acfg.Description = flowStreamAttempts, []string{"benchflow.attempt.>"}, "teamster bench: flow floor"
	rcfg := bus.ResultsStreamConfig(bus.StreamOptions{})
	rcfg.Name, rcfg.Subjects, rcfg.Description = flowStreamResults, []string{"benchflow.result.>"}, "teamster bench: flow floor"
	for _, cfg := range []jetstream.StreamConfig{acfg, rcfg} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return Row{}, fmt.Errorf("flow floor stream %s: %w", cfg.Name, err)
		}
		defer func() { _ = js.DeleteStream(context.Background(), cfg.Name) }()
	}
	ccfg, err := bus.HarnessConsumerConfig("benchflow")
	if err != nil {
		return Row{}, err
	}
	ccfg.FilterSubject = "benchflow.attempt.>"
	if _, err := js.CreateOrUpdateConsumer(ctx, flowStreamAttempts, ccfg); err != nil {
		return Row{}, fmt.Errorf("flow floor consumer: %w", err)
	}

	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	// redisTrip is one Redis round trip of the flow, on a client of its
	// own per role (router, each worker), as teamster's are; a no-op without
	// Redis.
	var script *redis.Script
	if mode != flowNoRedis {
		script = redis.NewScript(`return 1`)
		rdb, err := newRedis(f.srv.redisURL(), nil)
		if err != nil {
			return Row{}, err
		}
		err = script.Load(ctx, rdb).Err()
		rdb.Close()
		if err != nil {
			return Row{}, err
		}
	}
	redisTrip := func(key string) (func(context.Context) error, error) {
		if script == nil {
			return func(context.Context) error { return nil }, nil
		}
		rdb, err := newRedis(f.srv.redisURL(), nil)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { rdb.Close() })
		if mode == flowRedisBatched {
			ap, err := rdb.AutoPipeline()
			if err != nil {
				return nil, err
			}
			closers = append(closers, func() { _ = ap.Close() })
			return func(ctx context.Context) error { return script.EvalSha(ctx, ap, []string{key}).Err() }, nil
		}
		return func(ctx context.Context) error { return script.EvalSha(ctx, rdb, []string{key}).Err() }, nil
	}
	var (
		errOnce sync.Once
		flowErr error
	)
	fail := func(err error) { errOnce.Do(func() { flowErr = err }) }

	// The router: serves benchflow.submit.> in a queue group, one goroutine
	// per request, as teamster's router does. (Handling each message on the
	// subscription's goroutine instead, here and in the workers, made no
	// difference beyond noise at one in flight: 954-1,284 µs p50 against
	// 821-1,144 µs with a goroutine each, in three alternating pairs.)
	rnc, err := connectNATS(f.srv.natsURL, "flow-router")
	if err != nil {
		return Row{}, err
	}
	closers = append(closers, rnc.Close)
	rjs, _ := jetstream.New(rnc)
	accept, err := redisTrip("benchflow:router")
	if err != nil {
		return Row{}, err
	}
	if _, err := rnc.QueueSubscribe("benchflow.submit.>", "routers", func(m *nats.Msg) {
		go func() {
			if err := accept(ctx); err != nil {
				fail(fmt.Errorf("router redis: %w", err))
				return
			}
			rest := strings.TrimPrefix(m.Subject, "benchflow.submit.")
			msg := &nats.Msg{Subject: "benchflow.attempt." + rest, Data: m.Data, Header: nats.Header{}}
			msg.Header.Set(bus.HeaderMsgID, rest)
			if _, err := rjs.PublishMsg(ctx, msg, jetstream.WithExpectStream(flowStreamAttempts)); err != nil {
				fail(fmt.Errorf("router publish: %w", err))
				return
			}
			_ = m.Respond(p.reply)
		}()
	}); err != nil {
		return Row{}, err
	}

	// Two workers, as many runs each at most as the fleet's have slots.
	for w := 0; w < 2; w++ {
		wnc, err := connectNATS(f.srv.natsURL, fmt.Sprintf("flow-worker-%d", w))
		if err != nil {
			return Row{}, err
		}
		closers = append(closers, wnc.Close)
		wjs, _ := jetstream.New(wnc)
		cons, err := wjs.Consumer(ctx, flowStreamAttempts, ccfg.Durable)
		if err != nil {
			return Row{}, err
		}
		trip, err := redisTrip(fmt.Sprintf("benchflow:w%d", w))
		if err != nil {
			return Row{}, err
		}
		slots := make(chan struct{}, f.slots)
		runMsgs := make(chan *nats.Msg, 1) // nothing is sent to a run's subjects here
		run := func(m jetstream.Msg) {
			defer func() { <-slots }()
			rest := strings.TrimPrefix(m.Subject(), "benchflow.attempt.")
			tok, id, _ := strings.Cut(rest, ".")
			replyTo := flowInbox + "." + tok
			// claim
			if err := trip(ctx); err != nil {
				fail(fmt.Errorf("worker redis: %w", err))
				return
			}
			_ = m.Ack()
			var runSubs []*nats.Subscription
			for _, op := range []string{"inject", "cancel"} {
				sub, err := wnc.ChanSubscribe("benchflow.run."+id+"."+op, runMsgs)
				if err != nil {
					fail(err)
					return
				}
				runSubs = append(runSubs, sub)
			}
			for _, e := range p.events[:len(p.events)-1] {
				_ = wnc.Publish(replyTo, e)
			}
			// finish
			if err := trip(ctx); err != nil {
				fail(fmt.Errorf("worker redis: %w", err))
				return
			}
			res := &nats.Msg{Subject: "benchflow.result." + id, Data: p.result, Header: nats.Header{}}
			res.Header.Set(bus.HeaderMsgID, "result-"+id)
			if _, err := wjs.PublishMsg(ctx, res, jetstream.WithExpectStream(flowStreamResults)); err != nil {
				fail(fmt.Errorf("worker publish result: %w", err))
				return
			}
			// mark published
			if err := trip(ctx); err != nil {
				fail(fmt.Errorf("worker redis: %w", err))
				return
			}
			_ = wnc.Publish(replyTo, p.events[len(p.events)-1])
			for _, sub := range runSubs {
				_ = sub.Unsubscribe()
			}
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			slots <- struct{}{}
			go run(m)
		}, jetstream.PullMaxMessages(f.slots))
		if err != nil {
			return Row{}, err
		}
		closers = append(closers, cc.Stop)
	}

	// The client: one events subscription, each flow's goroutine waits for
	// its reply and its events.
	cnc, err := connectNATS(f.srv.natsURL, "flow-client")
	if err != nil {
		return Row{}, err
	}
	closers = append(closers, cnc.Close)
	inboxes := make([]chan struct{}, sessions)
	for i := range inboxes {
		inboxes[i] = make(chan struct{}, len(p.events))
	}
	csub, err := cnc.Subscribe(flowInbox+".*", func(m *nats.Msg) {
		i, err := strconv.Atoi(m.Subject[len(flowInbox)+1:])
		if err == nil && i >= 0 && i < sessions {
			inboxes[i] <- struct{}{}
		}
	})
	if err != nil {
		return Row{}, err
	}
	_ = csub.SetPendingLimits(-1, -1)
	if err := cnc.Flush(); err != nil {
		return Row{}, err
	}

	var (
		stop atomic.Bool
		next atomic.Int64
		wg   sync.WaitGroup
		w    meter
	)
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				id := next.Add(1)
				subj := "benchflow.submit." + strconv.Itoa(s) + "." + strconv.FormatInt(id, 10)
				t0 := time.Now()
				if _, err := cnc.Request(subj, p.attempt, 30*time.Second); err != nil {
					fail(fmt.Errorf("client request: %w", err))
					return
				}
				late := time.NewTimer(30 * time.Second)
				for range p.events {
					select {
					case <-inboxes[s]:
					case <-late.C:
						fail(fmt.Errorf("client: no events for flow %d within 30s", id))
						return
					}
				}
				late.Stop()
				w.done(time.Since(t0))
			}
		}()
	}
	time.Sleep(warm)
	if err := w.measure(ctx, f.srv, window); err != nil {
		return Row{}, err
	}
	completed := w.completed.Load()
	stop.Store(true)
	wg.Wait()
	errOnce.Do(func() {}) // no fail after this point
	if flowErr != nil {
		return Row{}, fmt.Errorf("flow floor: %w", flowErr)
	}
	rate := float64(completed) / w.elapsed.Seconds()
	progress("flow floor (%s): %.0f flows/s", what, rate)
	note := fmt.Sprintf("docs/PROTOCOL.md's flow of one attempt with none of teamster's work (bench/flowfloor.go); %d flows in %s", completed, w.elapsed.Round(time.Millisecond))
	if completed > 0 {
		cpu, rcpu := w.perOp()
		note = fmt.Sprintf("CPU per flow: %s in this process + %s redis-server; ", cpu, rcpu) + note
	}
	return Row{Scenario: fmt.Sprintf("floor: the flow's %s, %d in flight", what, sessions), Value: ptr(rate), Unit: "flows/s", Note: note}.withLatency(w.latencies()), nil
}

// flowFloorRatios compares teamster with the flow floor with Redis: its
// one-in-flight p50 with the floor's (round trips sent alone, as one flow
// at a time sends them), and its throughput at n in flight with the
// batched floor's. It also compares the flow floor itself with goal 1's
// floor (fl, the hops' tight-loop sum): what the contract's flow with no
// work at all would score on goal 1 on this machine. A row that was not
// measured in this run (-only) leaves its ratio out.
func flowFloorRatios(fl *floor, latency, floorOne, throughput, floorMany *Row, n int) []Row {
	var out []Row
	if fl != nil && floorOne != nil && floorOne.P50Us != nil {
		sum, idle := us(fl.sum(50, flowFloorRedisTrips)), us(fl.idle.sum(50, flowFloorRedisTrips))
		if sum > 0 && idle > 0 {
			out = append(out, Row{Scenario: "flow floor p50 / floor p50, 1 in flight", Value: ptr(*floorOne.P50Us / sum), Unit: "x",
				Note: fmt.Sprintf("%.0fµs / %.0fµs: the contract's flow with none of teamster's work, against goal 1's floor (the same %d hops' tight-loop sum); above 2 no implementation of the flow meets goal 1 on this machine; against the idle-server sum (%.0fµs): %.2fx",
					*floorOne.P50Us, sum, 1+2+1+flowFloorRedisTrips, idle, *floorOne.P50Us/idle)})
		}
	}
	if latency != nil && floorOne != nil && latency.P50Us != nil && floorOne.P50Us != nil && *floorOne.P50Us > 0 {
		out = append(out, Row{Scenario: "teamster p50 / flow floor p50, 1 in flight", Value: ptr(*latency.P50Us / *floorOne.P50Us), Unit: "x",
			Note: fmt.Sprintf("%.0fµs / %.0fµs: what teamster's own work adds to the contract's chained hops", *latency.P50Us, *floorOne.P50Us)})
	}
	if throughput != nil && floorMany != nil && throughput.Value != nil && floorMany.Value != nil && *floorMany.Value > 0 {
		out = append(out, Row{Scenario: fmt.Sprintf("teamster / flow floor (batched) throughput, %d in flight", n), Value: ptr(*throughput.Value / *floorMany.Value), Unit: "x",
			Note: fmt.Sprintf("%.0f attempts/s / %.0f flows/s", *throughput.Value, *floorMany.Value)})
	}
	return out
}
