package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/injection"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// probeImpl is the bench-only harness implementation: its run installs a V2
// injection handle that timestamps every queue call, then waits until its
// context ends. Worker configs name it as "implementation": "probe".
const probeImpl = "probe"

// probeHit is one queue call as the harness saw it: when it was made, and
// when the item was dispatched (its assertion had returned true).
type probeHit struct {
	text           string
	at, dispatched time.Time
}

// probes connects the probe harness's runs to the bench (same process, same
// clock).
var probes = struct {
	running chan string   // attempt ids of runs that installed their handle
	queued  chan probeHit // queue calls
}{running: make(chan string, 16), queued: make(chan probeHit, 4096)}

func init() {
	worker.RegisterImplementation(probeImpl, func(m selection.Manifest, _ json.RawMessage, _ worker.FactoryEnv) (harness.Harness, error) {
		return &probeHarness{m: m}, nil
	})
}

type probeHarness struct{ m selection.Manifest }

func (p *probeHarness) Manifest() selection.Manifest { return p.m }

func (p *probeHarness) Supports(a *bus.Attempt) (bool, string) {
	return harness.SupportsManifest(p.m, a)
}

func (p *probeHarness) RunAttempt(ctx context.Context, run *harness.Run) (*harness.Outcome, error) {
	run.SetInjector(probeHandle{})
	select {
	case probes.running <- run.Attempt.AttemptID:
	default:
	}
	<-ctx.Done()
	var te *teamster.Error
	if errors.As(context.Cause(ctx), &te) {
		return nil, te
	}
	return nil, teamster.Errorf(teamster.CodeCancelled, "probe: cancelled")
}

// probeHandle is the probe run's V2 handle. It records the time of the call
// first, then behaves as a harness must: assertion immediately before the
// queue mutation, admission, one settlement.
type probeHandle struct{}

func (probeHandle) QueueMessage(text string, opts injection.QueueOptions, assert injection.AssertFunc, _ injection.Kind) error {
	at := time.Now()
	ok := assert()
	select {
	case probes.queued <- probeHit{text: text, at: at, dispatched: time.Now()}:
	default:
	}
	if !ok {
		if opts.OnQueueSettled != nil {
			opts.OnQueueSettled(injection.Rejected)
		}
		return teamster.Errorf(teamster.CodeLeaseLost, "probe: assertion false")
	}
	if opts.OnQueueAccepted != nil {
		opts.OnQueueAccepted(true)
	}
	if opts.OnQueueSettled != nil {
		opts.OnQueueSettled(injection.Committed)
	}
	return nil
}

// benchHost is the bench's gateway host: it answers the worker's
// assertCurrent callbacks (every assertion holds) and nothing else.
type benchHost struct{ *client.Tools }

func (benchHost) AssertCurrent(context.Context, string, string) (bool, error) { return true, nil }

// measureInject starts one probe turn and sends it n injects (after warm) by
// attempt id, n by session key, then n source-bound ones under the gateway's
// own assertion, sequentially; each latency is from just before
// client.Inject to the harness's dispatch (its assertion returned true).
func measureInject(ctx context.Context, f *fleet, n, warm int) ([]Row, error) {
	progress("inject: %d injects by attemptId, %d by sessionKey and %d under the gateway's assertion into one running probe turn", n, n, n)
	session := "bench:inject"
	const hostID = "bench-gw"
	srv, err := f.client.ServeHost(hostID, benchHost{client.NewTools()})
	if err != nil {
		return nil, fmt.Errorf("inject: serve the host: %w", err)
	}
	defer srv.Stop()
	a := pinnedAttempt(session, probeHarnessID, "probe")
	a.HostID = hostID
	h, err := f.client.Submit(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("inject: submit the probe turn: %w", err)
	}
	defer h.Close()
	// Inject once claimed has arrived, as a gateway does: the worker
	// subscribes the run's subjects before it sends claimed, on the same
	// connection, so the server knows them by then. (The probe's in-process
	// signal below can come first.)
	events := h.Events()
	select {
	case e, ok := <-events:
		if !ok || e.Type != bus.EventClaimed {
			return nil, fmt.Errorf("inject: the probe turn's first event is %q, want claimed", e.Type)
		}
	case <-time.After(15 * time.Second):
		return nil, errors.New("inject: the probe turn was not claimed")
	}
	go func() {
		for range events { // injection events; the handle's buffer is 1,024
		}
	}()
	select {
	case id := <-probes.running:
		if id != h.AttemptID() {
			return nil, fmt.Errorf("inject: probe run %s started, want %s", id, h.AttemptID())
		}
	case <-time.After(15 * time.Second):
		return nil, errors.New("inject: the probe turn did not start")
	}

	// send injects warm+n items of one kind and returns, past the warm-up,
	// each request → dispatch latency, each reply round trip, and each
	// assertion's time (queue call → dispatch).
	type kind int
	const (
		byAttempt kind = iota
		bySession
		hostAsserted
	)
	send := func(k kind) (toDispatch, toReply, asserting latencies, err error) {
		for i := 0; i < warm+n; i++ {
			req := bus.InjectRequest{Text: fmt.Sprintf("probe-%d-%d", k, i), AuthorityKind: bus.AuthorityRun, AttemptID: h.AttemptID()}
			switch k {
			case bySession:
				req.AttemptID, req.SessionKey = "", session
			case hostAsserted:
				req.AuthorityKind, req.HostAssertion = bus.AuthoritySourceBound, fmt.Sprintf("bench-%d", i)
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t0 := time.Now()
			rep, err := f.client.Inject(rctx, req)
			tReply := time.Since(t0)
			cancel()
			if err != nil {
				return nil, nil, nil, fmt.Errorf("inject %d: %w", i, err)
			}
			if rep.Status != bus.StatusAccepted {
				return nil, nil, nil, fmt.Errorf("inject %d: %s", i, rep.Status)
			}
			var hit probeHit
			select {
			case hit = <-probes.queued:
			case <-time.After(5 * time.Second):
				return nil, nil, nil, fmt.Errorf("inject %d: the harness saw no queue call", i)
			}
			if hit.text != req.Text {
				return nil, nil, nil, fmt.Errorf("inject %d: the harness saw %q, want %q", i, hit.text, req.Text)
			}
			if i >= warm {
				toDispatch = append(toDispatch, hit.dispatched.Sub(t0))
				toReply = append(toReply, tReply)
				asserting = append(asserting, hit.dispatched.Sub(hit.at))
			}
		}
		return toDispatch, toReply, asserting, nil
	}
	byID, byIDReply, _, err := send(byAttempt)
	if err != nil {
		return nil, err
	}
	byKey, byKeyReply, _, err := send(bySession)
	if err != nil {
		return nil, err
	}
	asserted, assertedReply, assertRT, err := send(hostAsserted)
	if err != nil {
		return nil, err
	}

	if err := f.client.Cancel(ctx, h.AttemptID(), "bench done"); err != nil {
		return nil, fmt.Errorf("inject: cancel the probe turn: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	res, err := h.Result(rctx)
	if err != nil {
		return nil, fmt.Errorf("inject: result of the probe turn: %w", err)
	}
	if res.Status != teamster.StatusCancelled {
		return nil, fmt.Errorf("inject: the probe turn ended %s, want cancelled", res.Status)
	}
	return []Row{
		Row{Scenario: "inject: request → harness dispatch, run authority, by attemptId",
			Note: fmt.Sprintf("client → router (the attempt's record in Redis: two round trips) → worker → V2 QueueMessage, assertion (local) true; reply round trip p50 %s",
				byIDReply.pct(50).Round(time.Microsecond))}.withLatency(byID),
		Row{Scenario: "inject: request → harness dispatch, source-bound, gateway's assertion",
			Note: fmt.Sprintf("as above plus the worker's assertCurrent round trip to the gateway at dispatch (p50 %s); reply round trip p50 %s",
				assertRT.pct(50).Round(time.Microsecond), assertedReply.pct(50).Round(time.Microsecond))}.withLatency(asserted),
		Row{Scenario: "inject: request → harness dispatch, run authority, by sessionKey",
			Note: fmt.Sprintf("as the first, but the router reads the session's lease (one round trip); reply round trip p50 %s",
				byKeyReply.pct(50).Round(time.Microsecond))}.withLatency(byKey),
	}, nil
}
