package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
)

// Goals of the issue "Performance: measured against the physical floor".
const (
	goalRatio      = 2.0
	goalThroughput = 5000.0
)

// runOne submits a and waits for its result; it returns the time to the
// submit reply and to the result.
func runOne(ctx context.Context, c *client.Client, a *bus.Attempt) (reply, total time.Duration, res *bus.Result, err error) {
	t0 := time.Now()
	h, err := c.Submit(ctx, a)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("submit: %w", err)
	}
	defer h.Close()
	reply = time.Since(t0)
	res, err = h.Result(ctx)
	total = time.Since(t0)
	if err != nil {
		return reply, total, nil, fmt.Errorf("result of %s: %w", h.AttemptID(), err)
	}
	if res.Status != teamster.StatusOK {
		return reply, total, res, fmt.Errorf("%w: %s %v", errNotOK, res.Status, res.Error)
	}
	return reply, total, res, nil
}

// measureLatency runs n sequential turns of one session (after warm), one
// attempt in flight, and compares the p50 with the floor of the hops the
// flow is made of.
func measureLatency(ctx context.Context, f *fleet, fl *floor, n, warm int, profile string) ([]Row, error) {
	progress("latency: %d sequential echo turns (+%d warm-up)", n, warm)
	var total, reply latencies
	var cpu0 time.Duration
	stopProf := func() {}
	session := "bench:latency"
	for i := 0; i < warm+n; i++ {
		if i == warm {
			f.rt.reset()
			f.rt.record.Store(true)
			var err error
			if stopProf, err = startProfile(profile); err != nil {
				return nil, err
			}
			defer stopProf()
			cpu0 = processCPU()
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, t, _, err := runOne(rctx, f.client, echoAttempt(session))
		cancel()
		if err != nil {
			return nil, err
		}
		if i >= warm {
			total = append(total, t)
			reply = append(reply, r)
		}
	}
	// Round trips the router and the workers made per attempt, by kind. The
	// floor counts only those the attempt waits for (offPath).
	perAttempt := float64(n)
	pathTrips := float64(f.rt.trips.Load()-f.rt.kindCount(offPath)) / perAttempt
	breakdown := f.rt.breakdown(perAttempt)
	redisWait := time.Duration(float64(f.rt.wait.Load()) / perAttempt)
	cpuPer := time.Duration(float64(processCPU()-cpu0) / perAttempt)
	stopProf()
	f.rt.record.Store(false)
	redisP50s := f.rt.p50s()

	// Where the time goes: a second, shorter pass that timestamps the
	// claimed and result events with a second subscription on the reply
	// subjects (kept out of the pass above so it cannot slow it).
	phases, err := measurePhases(ctx, f, min(n, 500))
	if err != nil {
		return nil, err
	}

	redisHops := math.Round(pathTrips)
	floorP50, floorP99 := fl.sum(50, int(redisHops)), fl.sum(99, int(redisHops))
	idleP50, idleP99 := fl.idle.sum(50, int(redisHops)), fl.idle.sum(99, int(redisHops))
	ratio := float64(total.pct(50)) / float64(floorP50)
	hops := fmt.Sprintf("p50: sum of the hops' p50s, p99: sum of their p99s; 1 core request-reply (submit one way + result event one way) + 2 JetStream publish-with-ack (attempt, result) + 1 pull-and-ack + %.0f Redis round trips", redisHops)
	rows := []Row{
		Row{Scenario: "teamster: submit→result, 1 in flight", Note: fmt.Sprintf("echo turn, one session, sequential; %s; CPU per attempt in this process %s", phases, cpuPer.Round(time.Microsecond))}.withLatency(total),
		Row{Scenario: "teamster: submit→accepted reply", Note: "client.Submit alone (router: decode, select, 1 Redis round trip (id, reaper index and accept script in one pipeline), JetStream publish)"}.withLatency(reply),
		Row{Scenario: "redis round trips on an attempt's path (measured)", Value: ptr(pathTrips), Unit: "trips",
			Note: fmt.Sprintf("router + worker clients, go-redis hook, renewals excluded: %s (the floor counts %.0f: zadd, the reaper index move after a claim, and the reaper's scans are sent off the attempt's path); mean time in all of them per attempt %s (the floor's %.0f round trips at p50: %s); p50 by kind: %s",
				breakdown, redisHops, redisWait.Round(time.Microsecond), redisHops, (time.Duration(redisHops) * fl.redis.pct(50)).Round(time.Microsecond), redisP50s)},
		Row{Scenario: "floor: sum of the flow's hops", P50Us: ptr(us(floorP50)), P99Us: ptr(us(floorP99)), Note: hops},
		Row{Scenario: "teamster p50 / floor p50", Value: ptr(ratio), Unit: "x",
			Note: fmt.Sprintf("%s / %s", total.pct(50).Round(time.Microsecond), floorP50.Round(time.Microsecond))}.
			withGoal(fmt.Sprintf("<= %.0fx", goalRatio), ratio <= goalRatio),
		Row{Scenario: "floor: sum of the flow's hops, idle servers", P50Us: ptr(us(idleP50)), P99Us: ptr(us(idleP99)),
			Note: fmt.Sprintf("the same hops, each timed after %s of sleep, so the servers and threads it wakes have gone idle, as between the hops of one attempt in flight; for reading the goal row on this machine, not the goal's floor", floorIdle)},
		Row{Scenario: "teamster p50 / idle-server floor p50", Value: ptr(float64(total.pct(50)) / float64(idleP50)), Unit: "x",
			Note: fmt.Sprintf("%s / %s", total.pct(50).Round(time.Microsecond), idleP50.Round(time.Microsecond))},
	}
	return rows, nil
}

// measurePhases times the claimed and result events of n sequential turns
// and summarises the p50 of each phase.
func measurePhases(ctx context.Context, f *fleet, n int) (string, error) {
	spy, err := connectNATS(f.srv.natsURL, "bench-spy")
	if err != nil {
		return "", err
	}
	defer spy.Close()
	type stamp struct {
		claimed, result time.Time
	}
	var mu sync.Mutex
	stamps := map[string]*stamp{}
	sub, err := spy.Subscribe("_INBOX.benchphase.>", func(m *nats.Msg) {
		now := time.Now()
		var e struct {
			AttemptID string `json:"attemptId"`
			Type      string `json:"type"`
		}
		if json.Unmarshal(m.Data, &e) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		s := stamps[e.AttemptID]
		if s == nil {
			s = &stamp{}
			stamps[e.AttemptID] = s
		}
		switch e.Type {
		case bus.EventClaimed:
			s.claimed = now
		case bus.EventResult:
			s.result = now
		}
	})
	if err != nil {
		return "", err
	}
	defer sub.Unsubscribe()
	if err := spy.Flush(); err != nil {
		return "", err
	}
	var toReply, toClaimed, claimedToResult latencies
	for i := 0; i < n; i++ {
		a := echoAttempt("bench:phases")
		a.ReplyTo = fmt.Sprintf("_INBOX.benchphase.%d", i)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		h, err := f.client.Submit(rctx, a)
		if err != nil {
			cancel()
			return "", err
		}
		tReply := time.Now()
		_, err = h.Result(rctx)
		h.Close()
		cancel()
		if err != nil {
			return "", err
		}
		// The spy's copy of the result event may trail the client's.
		deadline := time.Now().Add(time.Second)
		for {
			mu.Lock()
			s := stamps[h.AttemptID()]
			done := s != nil && !s.result.IsZero() && !s.claimed.IsZero()
			var st stamp
			if done {
				st = *s
			}
			mu.Unlock()
			if done {
				toReply = append(toReply, tReply.Sub(t0))
				toClaimed = append(toClaimed, st.claimed.Sub(t0))
				claimedToResult = append(claimedToResult, st.result.Sub(st.claimed))
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return fmt.Sprintf("phases p50: submit→reply %s, submit→claimed event %s, claimed→result event %s (n=%d)",
		toReply.pct(50).Round(time.Microsecond), toClaimed.pct(50).Round(time.Microsecond),
		claimedToResult.pct(50).Round(time.Microsecond), len(toClaimed)), nil
}

// offPath tells the round trips that no attempt waits for: lease renewals
// (their own timer), the keeper's reaper index moves after a claim (a plain
// ZADD sent by a goroutine of its own; accept's ZADD goes inside its
// pipeline) and the reaper's scans.
func offPath(kind string) bool {
	return strings.HasPrefix(kind, "pipeline[renew") || kind == "zadd" || kind == "script(due)"
}

// kindCount sums the round trips of the kinds match accepts.
func (c *rtCounter) kindCount(match func(string) bool) int64 {
	var n int64
	c.kinds.Range(func(k, v any) bool {
		if match(k.(string)) {
			n += v.(*atomic.Int64).Load()
		}
		return true
	})
	return n
}

// resultAudit counts result events per attempt on the reply subjects under a
// prefix, on its own connection: a second result for an attempt would show
// here even though client.Handle ignores it.
type resultAudit struct {
	mu      sync.Mutex
	results map[string]int
	nc      *nats.Conn
	sub     *nats.Subscription
}

var resultMarker = []byte(`"type":"result"`)

func newResultAudit(url, prefix string) (*resultAudit, error) {
	nc, err := connectNATS(url, "bench-audit")
	if err != nil {
		return nil, err
	}
	a := &resultAudit{results: map[string]int{}, nc: nc}
	// The audit runs in the measured process: it skips what is not a result
	// without decoding, and decodes with the envelopes' codec.
	a.sub, err = nc.Subscribe(prefix+".>", func(m *nats.Msg) {
		if !bytes.Contains(m.Data, resultMarker) {
			return
		}
		var e struct {
			AttemptID string `json:"attemptId"`
			Type      string `json:"type"`
		}
		if jsonv1.Unmarshal(m.Data, &e) != nil || e.Type != bus.EventResult {
			return
		}
		a.mu.Lock()
		a.results[e.AttemptID]++
		a.mu.Unlock()
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = a.sub.SetPendingLimits(-1, -1)
	return a, nc.Flush()
}

func (a *resultAudit) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.results[id]
}

func (a *resultAudit) close() { a.nc.Close() }

// durableCounts returns, for each subject of TEAMSTER_RESULTS, how many
// results it holds.
func durableCounts(ctx context.Context, c *client.Client) (map[string]uint64, error) {
	js, err := jetstream.New(c.Conn())
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, bus.StreamResults)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(bus.SubjectResults))
	if err != nil {
		return nil, err
	}
	return info.State.Subjects, nil
}

// throughputRun is the outcome of one throughput window.
type throughputRun struct {
	sessions  int
	slots     int    // of each measured worker
	w         *meter // the window: results inside it, their latencies, its CPU
	submitted int
	accepted  int
	errors    int
	firstErr  string
	missing   int // accepted attempts without a result event at the audit
	dupes     int // attempts with more than one result event
	durableOK bool
	durable   string
	trips     int64         // Redis round trips of the router and workers during the window
	cmds      int64         // commands in them
	kinds     string        // commands by kind, per result
	redisWait time.Duration // time callers spent in those round trips
	issued    int64         // round trips as a cluster client's callers issued them (each pipeline once); cluster mode only
	topology  *topologyRun  // nil on the standalone redis-server
}

// measureThroughput runs `sessions` session loops (submit, wait for the
// result, repeat) across the fleet's workers for warm + window and counts
// the results completed inside the window; then it stops the loops, lets
// their last turns finish and checks that every attempt got exactly one
// result: one event on its reply subject and one durable result.
func measureThroughput(ctx context.Context, f *fleet, run, sessions int, warm, window time.Duration, profile string) (*throughputRun, error) {
	progress("throughput: %d sessions in flight, %s warm-up + %s window", sessions, warm, window)
	// The attempts use the client's own reply subjects (its one events
	// subscription), as a gateway does; the audit is a second subscriber
	// under the client's inbox prefix (it also sees the submit replies,
	// which it skips).
	audit, err := newResultAudit(f.srv.natsURL, clientInbox)
	if err != nil {
		return nil, err
	}
	defer audit.close()

	var (
		stop      atomic.Bool
		w         meter
		mu        sync.Mutex
		ids       = make([][]string, sessions)
		errs      int
		firstErr  string
		submitted atomic.Int64
		wg        sync.WaitGroup
	)
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench:tp%d:%d", run, s)
			for !stop.Load() {
				a := echoAttempt(key)
				rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				submitted.Add(1)
				t0 := time.Now()
				h, err := f.client.Submit(rctx, a)
				if err != nil {
					cancel()
					mu.Lock()
					errs++
					if firstErr == "" {
						firstErr = "submit: " + err.Error()
					}
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				res, err := h.Result(rctx)
				d := time.Since(t0)
				h.Close()
				cancel()
				ids[s] = append(ids[s], h.AttemptID())
				if err == nil && res.Status != teamster.StatusOK {
					err = fmt.Errorf("%w: %s %v", errNotOK, res.Status, res.Error)
				}
				if err != nil {
					mu.Lock()
					errs++
					if firstErr == "" {
						firstErr = "result: " + err.Error()
					}
					mu.Unlock()
					continue
				}
				w.done(d)
			}
		}()
	}
	time.Sleep(warm)
	stopProfile, err := startProfile(profile)
	if err != nil {
		return nil, err
	}
	f.rt.reset()
	if f.issued != nil {
		f.issued.reset()
	}
	if err := w.measure(ctx, f.srv, window); err != nil {
		return nil, err
	}
	completed := w.completed.Load()
	trips := f.rt.trips.Load()
	kinds := f.rt.opBreakdown(float64(max(completed, 1)))
	cmds := f.rt.cmds.Load()
	redisWait := time.Duration(f.rt.wait.Load())
	var issued int64
	if f.issued != nil {
		// A cluster pipeline's node round trips run in parallel: the
		// callers wait for the pipeline, once.
		issued = f.issued.trips.Load()
		redisWait = time.Duration(f.issued.wait.Load())
	}
	stopProfile()
	stop.Store(true)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(90 * time.Second):
		return nil, fmt.Errorf("throughput: session loops did not finish within 90s after the window")
	}

	tr := &throughputRun{sessions: sessions, slots: f.slots, w: &w, errors: errs, firstErr: firstErr,
		submitted: int(submitted.Load()), trips: trips, cmds: cmds, kinds: kinds, redisWait: redisWait, issued: issued}
	// Let the audit's copies of the last result events arrive, then look
	// for missing and duplicate results.
	var all []string
	for _, l := range ids {
		all = append(all, l...)
	}
	tr.accepted = len(all)
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr.missing, tr.dupes = 0, 0
		for _, id := range all {
			switch n := audit.count(id); {
			case n == 0:
				tr.missing++
			case n > 1:
				tr.dupes++
			}
		}
		if tr.missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a late duplicate would land here
	tr.dupes = 0
	for _, id := range all {
		if audit.count(id) > 1 {
			tr.dupes++
		}
	}
	counts, err := durableCounts(ctx, f.client)
	if err != nil {
		tr.durable = "durable check failed: " + err.Error()
	} else {
		bad := 0
		for _, id := range all {
			subj, _ := bus.ResultSubject(id)
			if counts[subj] != 1 {
				bad++
			}
		}
		tr.durableOK = bad == 0
		tr.durable = fmt.Sprintf("durable results: %d of %d attempts hold exactly one", len(all)-bad, len(all))
	}
	progress("throughput: %d sessions: %.0f attempts/s (%d in %s), %d errors, %d missing, %d duplicate results",
		sessions, float64(completed)/w.elapsed.Seconds(), completed, w.elapsed.Round(time.Millisecond), errs, tr.missing, tr.dupes)
	return tr, nil
}

func (tr *throughputRun) row() Row {
	w, completed := tr.w, tr.w.completed.Load()
	rate := float64(completed) / w.elapsed.Seconds()
	exact := tr.errors == 0 && tr.missing == 0 && tr.dupes == 0 && tr.durableOK && tr.accepted == tr.submitted
	note := fmt.Sprintf("%d results in %s window; latency is submit→result under load; %d attempts submitted in all, %d accepted, %d errors, %d without a result event, %d with more than one; %s",
		completed, w.elapsed.Round(time.Millisecond), tr.submitted, tr.accepted, tr.errors, tr.missing, tr.dupes, tr.durable)
	if completed > 0 {
		cpu, rcpu := w.perOp()
		note = fmt.Sprintf("CPU per attempt: %s in this process (router, workers, client, NATS server) + %s redis-server; this process used %.0f%% of %d CPUs, the whole machine (every process) %.0f%%; %.1f Redis round trips per attempt (%.1f commands each); ",
			cpu, rcpu, 100*float64(w.cpu)/float64(w.elapsed)/float64(runtime.NumCPU()), runtime.NumCPU(), w.machineBusy,
			float64(tr.trips)/float64(completed), float64(tr.cmds)/float64(max(tr.trips, 1))) + fmt.Sprintf("callers spent %s per attempt in Redis round trips (pool waits included); ",
			(tr.redisWait/time.Duration(completed)).Round(time.Microsecond)) + w.heapPerOp() + "; " + note + "; Redis commands per result by kind: " + tr.kinds
	}
	if tr.firstErr != "" {
		note += "; first error: " + tr.firstErr
	}
	note = fmt.Sprintf("2 workers × %d slots; ", tr.slots) + note
	scenario := fmt.Sprintf("teamster: throughput, %d sessions in flight", tr.sessions)
	if tr.topology != nil {
		// The same figures on a replicated Redis; goal 2 is the standalone
		// row's.
		note += "; " + tr.topology.note(completed)
		r := Row{Scenario: scenario + ", " + topologyTitle[tr.topology.mode], Value: ptr(rate), Unit: "attempts/s", Note: note}.withLatency(w.latencies())
		return r.withGoal("exactly one result each", exact && tr.topology.failover == "")
	}
	r := Row{Scenario: scenario, Value: ptr(rate), Unit: "attempts/s", Note: note}.withLatency(w.latencies())
	if tr.sessions >= 1024 {
		return r.withGoal(fmt.Sprintf(">= %.0f/s, exactly one result each", goalThroughput), rate >= goalThroughput && exact)
	}
	return r.withGoal("exactly one result each", exact)
}

// startProfile starts a CPU profile into path ("" profiles nothing); the
// returned function stops it, once.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}
