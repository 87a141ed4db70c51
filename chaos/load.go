package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/selection"
)

// Attempt kinds: what part of the suite submitted it.
const (
	kindLoad  = "load"  // a session's turn
	kindNudge = "nudge" // an extra turn a scenario asked a session for
	kindBurst = "burst" // one of many concurrent one-turn sessions
	kindProbe = "probe" // a recovery probe on a fresh session
	kindFirst = "first" // the attempt that shows a fresh fleet serves, before any load
)

// Submit states.
const (
	statePending    = "pending"
	stateAccepted   = "accepted"
	stateRejected   = "rejected"   // a definite refusal: nothing was recorded
	stateUnanswered = "unanswered" // no definite answer within the submit bound
)

// submitTry bounds one submit request; a try without a reply is resubmitted
// with the same attemptId, which the router answers from its record. It is
// longer than the router's own bounds of a submit (10s of Redis work, then
// up to router.SubmitPublishBudget, 20s, of publishing during a JetStream
// leader election), so that the suite hears every answer a router gives,
// however late. Recovery probes use
// probeTry instead: they measure the fleet, not the client's patience with a
// request that a dying router swallowed.
const (
	submitTry = 30 * time.Second
	probeTry  = 2 * time.Second
)

// attempt is one attempt the suite submitted and everything it saw of it.
// Fields after mu are guarded by the tracker's mutex.
type attempt struct {
	id, session, kind string
	seq               int64
	a                 *bus.Attempt
	done              chan struct{} // closed at the first result seen (event or durable)
	doneOnce          sync.Once

	tries      int
	retries    []retry // why each resubmit happened
	state      string
	code       string // the rejection code, or why it went unanswered
	acceptedAt time.Time
	handle     *client.Handle

	events    int
	claimed   *bus.ClaimedData
	claimedAt time.Time
	results   []resultEvent
	foreign   int // events on this attempt's replyTo about another attempt

	redisClaim  time.Time   // the claim time in the attempt's Redis record (Redis's clock)
	redisAccept time.Time   // the acceptance time in that record
	redisWorker string      // the worker that claimed it, by that record
	redisState  string      // the record's state at the end
	clientRes   *bus.Result // what Handle.Result returned
	durable     *bus.Result // client.Result after the scenario
	durableErr  error
}

// retry is one resubmit of an attempt: why, and when the try ended.
type retry struct {
	why string
	at  time.Time
}

// Why a try was resubmitted.
const (
	retryNoReply      = "no reply"      // the request timed out: a router died, NATS is down
	retryNoResponders = "no responders" // no router was subscribed at that moment
	retryFallback     = "fallback"      // the router saw no live worker hosting the harness
)

// resultEvent is one result event seen on an attempt's replyTo.
type resultEvent struct {
	at   time.Time
	seq  int64
	data []byte
}

func (a *attempt) markDone() { a.doneOnce.Do(func() { close(a.done) }) }

// isDone reports whether a result of a was seen.
func isDone(a *attempt) bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// tracker holds every attempt of a scenario.
type tracker struct {
	mu        sync.Mutex
	byID      map[string]*attempt
	all       []*attempt
	sessions  map[string][]*attempt // accepted attempts, in the order their accepted replies came
	badEvents int
}

func newTracker() *tracker {
	return &tracker{byID: map[string]*attempt{}, sessions: map[string][]*attempt{}}
}

func (t *tracker) get(id string) *attempt {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// accepted returns the accepted attempts in creation order.
func (t *tracker) accepted() []*attempt {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*attempt
	for _, a := range t.all {
		if a.state == stateAccepted {
			out = append(out, a)
		}
	}
	return out
}

// running returns, per worker, the accepted attempts it claimed whose result
// has not been seen.
func (t *tracker) running() map[string][]*attempt {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][]*attempt{}
	for _, a := range t.all {
		if a.claimed != nil && len(a.results) == 0 {
			if isDone(a) {
				continue
			}
			out[a.claimed.WorkerID] = append(out[a.claimed.WorkerID], a)
		}
	}
	return out
}

// driver drives load through the client package and watches every event.
type driver struct {
	f           *fleet
	t           *tracker
	run         string // prefix of every attempt id of the scenario
	replyPrefix string
	submitBound time.Duration
	sub         *nats.Subscription
	n           atomic.Int64 // attempts made
	fresh       atomic.Int64 // fresh sessions made (bursts, probes)
}

func newDriver(f *fleet, run string, submitBound time.Duration) (*driver, error) {
	d := &driver{f: f, t: newTracker(), run: run, replyPrefix: "_INBOX.chaos." + run,
		submitBound: submitBound}
	sub, err := f.nc.Subscribe(d.replyPrefix+".>", d.onEvent)
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	d.sub = sub
	return d, nil
}

func (d *driver) close() {
	if d.sub != nil {
		_ = d.sub.Unsubscribe()
	}
	for _, a := range d.t.accepted() {
		if a.handle != nil {
			a.handle.Close()
		}
	}
}

// onEvent records every event on every attempt's replyTo, including any
// after the first result (the client's Handle ignores those; the suite
// counts them).
func (d *driver) onEvent(m *nats.Msg) {
	var e bus.Event
	if err := bus.Decode(m.Data, &e); err != nil {
		d.t.mu.Lock()
		d.t.badEvents++
		d.t.mu.Unlock()
		return
	}
	owner := d.t.get(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	if owner == nil {
		return
	}
	d.t.mu.Lock()
	if e.AttemptID != owner.id {
		owner.foreign++
		d.t.mu.Unlock()
		return
	}
	owner.events++
	switch e.Type {
	case bus.EventClaimed:
		var cd bus.ClaimedData
		if err := json.Unmarshal(e.Data, &cd); err == nil && owner.claimed == nil {
			owner.claimed, owner.claimedAt = &cd, time.Now()
		}
	case bus.EventResult:
		owner.results = append(owner.results, resultEvent{at: time.Now(), seq: e.Seq, data: append([]byte(nil), e.Data...)})
	}
	d.t.mu.Unlock()
	if e.Type == bus.EventResult {
		owner.markDone()
	}
}

// newAttempt makes an attempt of session with prompt; it is tracked from now.
func (d *driver) newAttempt(session, kind, prompt string) *attempt {
	n := d.n.Add(1)
	id := fmt.Sprintf("%s-%05d", d.run, n)
	a := &attempt{id: id, session: session, kind: kind, seq: n, state: statePending, done: make(chan struct{})}
	a.a = &bus.Attempt{
		V: bus.Version, AttemptID: id, AgentID: "main", SessionKey: session, SessionID: "sid-" + session,
		StorePath: "/var/openclaw/" + session, Provider: "openai", ModelID: "gpt-5.6-sol",
		ModelProvider: &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}},
			RequestTransportOverrides: "none"},
		Prompt: prompt, TimeoutMs: 30_000,
		ReplyTo: d.replyPrefix + "." + id,
	}
	d.t.mu.Lock()
	d.t.byID[id] = a
	d.t.all = append(d.t.all, a)
	d.t.mu.Unlock()
	return a
}

// submit submits a until the fleet answers definitely: accepted or refused
// (a refusal, internal included, says nothing was recorded). A try without a
// reply (a router died, NATS is down), with no router subscribed, or answered
// fallback (the router saw no live worker, although the suite runs some) is
// resubmitted with the same attemptId, for up to the submit bound.
func (d *driver) submit(ctx context.Context, a *attempt) { d.submitWith(ctx, a, submitTry) }

// submitWith is submit with a bound on each try.
func (d *driver) submitWith(ctx context.Context, a *attempt, try time.Duration) {
	deadline := time.Now().Add(d.submitBound)
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(0))
	for {
		d.t.mu.Lock()
		a.tries++
		d.t.mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, try)
		h, err := d.f.client.Submit(sctx, a.a)
		cancel()
		var te *teamster.Error
		var rejected *client.RejectedError
		var why string
		switch {
		case err == nil && h != nil && h.Reply.Status == bus.StatusAccepted:
			d.t.mu.Lock()
			a.state, a.acceptedAt, a.handle = stateAccepted, time.Now(), h
			d.t.sessions[a.session] = append(d.t.sessions[a.session], a)
			d.t.mu.Unlock()
			return
		case err == nil && h != nil && h.Reply.Status == bus.StatusFallback:
			why = retryFallback
		case errors.As(err, &rejected):
			// The router's refusal: final.
			d.t.mu.Lock()
			a.state, a.code = stateRejected, string(teamster.CodeOf(err))
			d.t.mu.Unlock()
			return
		case errors.As(err, &te):
			why = retryNoResponders // the client's own error: nobody answered
		default:
			why = retryNoReply
		}
		d.t.mu.Lock()
		a.retries = append(a.retries, retry{why, time.Now()})
		d.t.mu.Unlock()
		wait := bo.NextBackOff()
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			d.t.mu.Lock()
			a.state, a.code = stateUnanswered, why
			d.t.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// pollDurable marks a done when its durable result exists.
func (d *driver) pollDurable(ctx context.Context, a *attempt) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := d.f.client.Result(ctx, a.id); err == nil {
		a.markDone()
	}
}

// await waits up to timeout for a's result (its event, or the durable result
// when events were lost) and returns it, nil when none came.
func (d *driver) await(ctx context.Context, a *attempt, timeout time.Duration) *bus.Result {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-a.done:
			return d.firstResult(ctx, a)
		case <-tick.C:
			d.pollDurable(ctx, a)
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// firstResult is the first result event's result, else the durable one.
func (d *driver) firstResult(ctx context.Context, a *attempt) *bus.Result {
	d.t.mu.Lock()
	var data []byte
	if len(a.results) > 0 {
		data = a.results[0].data
	}
	d.t.mu.Unlock()
	if data != nil {
		var r bus.Result
		if err := bus.Decode(data, &r); err == nil {
			return &r
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := d.f.client.Result(ctx, a.id)
	if err != nil {
		return nil
	}
	return r
}

// session is one session of the load: its turns are submitted one after the
// other (each waits for the previous one's accepted reply), with up to depth
// turns outstanding, so later turns queue behind a running one.
type session struct {
	key   string
	depth int
	long  bool // turns of 6-11 sleeps instead of 2-5
	nudge chan struct{}
}

// turnPrompt is a scripted turn of a few steps with short sleeps between:
// every step is recorded in the ledger after the run checked its lease.
func turnPrompt(session string, turn int, long bool) string {
	steps := []string{fmt.Sprintf(`{"say":%q}`, fmt.Sprintf("%s turn %d", session, turn))}
	n := 2 + rand.IntN(4)
	if long {
		n = 6 + rand.IntN(6)
	}
	for i := 0; i < n; i++ {
		steps = append(steps, fmt.Sprintf(`{"sleep":%d}`, 40+rand.IntN(220)), fmt.Sprintf(`{"say":"step %d"}`, i))
	}
	return `{"script":[` + strings.Join(steps, ",") + `]}`
}

// runSession plays one session until stop; a nudge submits an extra turn at
// once, whatever is outstanding.
func (d *driver) runSession(ctx context.Context, s *session, stop <-chan struct{}) {
	var out []*attempt
	turn := 0
	submitTurn := func(kind string) {
		turn++
		a := d.newAttempt(s.key, kind, turnPrompt(s.key, turn, s.long))
		d.submit(ctx, a)
		if a.state == stateAccepted {
			out = append(out, a)
		}
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-s.nudge:
			submitTurn(kindNudge)
			continue
		default:
		}
		if len(out) < s.depth {
			submitTurn(kindLoad)
			select {
			case <-time.After(time.Duration(rand.IntN(150)) * time.Millisecond):
			case <-stop:
				return
			}
			continue
		}
		select {
		case <-out[0].done:
			out = out[1:]
		case <-s.nudge:
			submitTurn(kindNudge)
		case <-tick.C:
			d.pollDurable(ctx, out[0]) // its result event may have been lost
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// burst submits n one-turn sessions at once and returns when every submit has
// its definite answer. It closes early once the first k of them were
// answered, so that a fault can land while the rest are in flight.
func (d *driver) burst(ctx context.Context, n, k int, early chan<- struct{}) {
	var wg sync.WaitGroup
	var answered atomic.Int64
	var once sync.Once
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("agent:chaos:burst:%s:%d", d.run, d.fresh.Add(1))
			a := d.newAttempt(key, kindBurst, `{"script":[{"say":"burst"},{"sleep":50},{"say":"done"}]}`)
			d.submit(ctx, a)
			if answered.Add(1) >= int64(k) {
				once.Do(func() { close(early) })
			}
		}()
	}
	wg.Wait()
	once.Do(func() { close(early) })
}

// probe measures recovery: from since, it submits fresh one-turn attempts on
// fresh sessions until one completes ok, and returns how long after since
// that was; false when none did within bound.
func (d *driver) probe(ctx context.Context, kind string, since time.Time, bound time.Duration) (time.Duration, bool) {
	deadline := since.Add(bound)
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		a := d.newAttempt(fmt.Sprintf("agent:chaos:probe:%s:%d", d.run, d.fresh.Add(1)), kind, "probe")
		d.submitWith(ctx, a, probeTry)
		if a.state != stateAccepted {
			continue
		}
		r := d.await(ctx, a, min(10*time.Second, time.Until(deadline)))
		if r != nil && r.Status == teamster.StatusOK {
			return time.Since(since), true
		}
	}
	return bound, false
}

// collect waits until every accepted attempt has a result, or the deadline.
func (d *driver) collect(ctx context.Context, deadline time.Time) {
	for _, a := range d.t.accepted() {
		for !isDone(a) && time.Now().Before(deadline) && ctx.Err() == nil {
			select {
			case <-a.done:
			case <-time.After(time.Second):
				d.pollDurable(ctx, a)
			}
		}
	}
}

// finalRead reads every accepted attempt's durable result and what the
// client's Handle returns, with a few requests at once.
func (d *driver) finalRead(ctx context.Context) {
	work := make(chan *attempt)
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				var durable *bus.Result
				var derr error
				for try := 0; try < 3; try++ {
					rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					durable, derr = d.f.client.Result(rctx, a.id)
					cancel()
					if derr == nil || errors.Is(derr, client.ErrNoResult) {
						break
					}
				}
				var cres *bus.Result
				if isDone(a) {
					hctx, cancel := context.WithTimeout(ctx, 4*time.Second)
					cres, _ = a.handle.Result(hctx)
					cancel()
				}
				d.t.mu.Lock()
				a.durable, a.durableErr, a.clientRes = durable, derr, cres
				d.t.mu.Unlock()
			}
		}()
	}
	for _, a := range d.t.accepted() {
		work <- a
	}
	close(work)
	wg.Wait()
}
