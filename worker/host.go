package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// errRunEnded says an event came after the run's result.
var errRunEnded = errors.New("the run has ended")

// emit sends one event with the next seq. Seq numbers are gap-free: a seq is
// used only once the lease has it reserved, and events are serialised so they
// reach the wire in seq order. Extending the reservation (a fenced round trip
// every SeqReservation events, when renewals have not kept ahead) happens
// outside the run's lock, on a context of its own: the run's context may
// have ended (a cancel, the deadline) while the harness still reports what
// it did, and those events must go out too.
func (r *run) emit(eventType string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	r.mu.Lock()
	for {
		if r.ended {
			r.mu.Unlock()
			return errRunEnded
		}
		seq := r.seq + 1
		if r.lease.Reserved(seq) {
			_ = r.lease.NoteSeq(r.ctx, seq) // reserved: no round trip
			r.seq = seq
			err := r.publishEvent(seq, eventType, b)
			r.mu.Unlock()
			if err != nil {
				r.log().Debug("event not sent: " + err.Error())
			}
			return nil
		}
		if wait := r.reserving; wait != nil {
			// Another emitter is extending the reservation.
			r.mu.Unlock()
			<-wait
			r.mu.Lock()
			continue
		}
		done := make(chan struct{})
		r.reserving = done
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.w.cfg.LeaseTTL())
		err := r.lease.NoteSeq(ctx, seq)
		cancel()
		r.mu.Lock()
		r.reserving = nil
		close(done)
		if err != nil {
			r.mu.Unlock()
			return err
		}
	}
}

// publishEvent sends an event to replyTo; r.mu is held.
func (r *run) publishEvent(seq int64, eventType string, data []byte) error {
	if r.attempt.ReplyTo == "" {
		return nil
	}
	return bus.SendEvent(r.w.nc, r.attempt.ReplyTo, &bus.Event{V: bus.Version, AttemptID: r.attempt.AttemptID,
		Seq: seq, Type: eventType, Data: data})
}

// subscribe serves the run's subjects (teamster.run.<attemptId>.inject and
// .cancel) while it runs, delivering into the worker's one run-message
// channel (no goroutine per subscription); dispatchRunMsgs routes the
// messages to the run. Two literal subjects rather than one wildcard: the
// server updates its subject cache for a literal subscription in one step,
// for a wildcard by scanning the whole cache (measured at 1,024 sessions in
// flight: 9% of the fleet's CPU went to that scan on SUB and UNSUB).
func (r *run) subscribe() error {
	inject, err := bus.RunInjectSubject(r.attempt.AttemptID)
	if err != nil {
		return err
	}
	cancel, _ := bus.RunCancelSubject(r.attempt.AttemptID)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, subj := range []string{inject, cancel} {
		sub, err := r.w.nc.ChanSubscribe(subj, r.w.runMsgs)
		if err != nil {
			r.unsubscribeLocked()
			return err
		}
		r.subs = append(r.subs, sub)
	}
	return nil
}

// dispatchRunMsgs routes the messages of every run's subjects to their run:
// a cancel is handled at once, an inject in its own goroutine (it may wait
// for the harness's handle and check a source in Redis).
func (w *Worker) dispatchRunMsgs() {
	for {
		var m *nats.Msg
		select {
		case m = <-w.runMsgs:
		case <-w.done:
			return
		}
		rest, ok := strings.CutPrefix(m.Subject, "teamster.run.")
		id, op, ok2 := strings.Cut(rest, ".")
		if !ok || !ok2 {
			continue
		}
		w.mu.Lock()
		r := w.runs[id]
		w.mu.Unlock()
		switch {
		case r == nil && op == "inject":
			respond(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: id,
				Error: teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running here", id)})
		case r == nil:
			respond(m, bus.Rejected(teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running here", id)))
		case op == "cancel":
			r.onCancel(m)
		default: // inject: a run subscribes only its .cancel and .inject
			go r.onInject(m)
		}
	}
}

func (r *run) unsubscribe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unsubscribeLocked()
}

// unsubscribeLocked drops the run's subscriptions; r.mu is held.
func (r *run) unsubscribeLocked() {
	for _, sub := range r.subs {
		_ = sub.Unsubscribe()
	}
	r.subs = nil
}

func (r *run) onCancel(m *nats.Msg) {
	if r.finishing.Load() {
		// The outcome is decided (being recorded, or already sent): there is
		// nothing left to cancel.
		respond(m, bus.Rejected(teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s has ended", r.attempt.AttemptID)))
		return
	}
	var req bus.CancelRequest
	if err := bus.Decode(m.Data, &req); err != nil {
		respond(m, bus.Rejected(err))
		return
	}
	reason := req.Reason
	if reason == "" {
		reason = "cancelled by request"
	}
	r.log().WithField("reason", reason).Info("cancel requested")
	r.cancel(teamster.Errorf(teamster.CodeCancelled, "%s", reason))
	respond(m, bus.OK())
}

func respond(m *nats.Msg, v any) {
	if b, err := bus.Encode(v); err == nil {
		_ = m.Respond(b)
	}
}

// host is the harness.Host of a run.
type host run

func (h *host) run() *run { return (*run)(h) }

// Emit sends a partial, agent or tool event.
func (h *host) Emit(_ context.Context, eventType string, data any) error {
	switch eventType {
	case bus.EventPartial, bus.EventAgent, bus.EventTool:
	default:
		return teamster.Errorf(teamster.CodeInvalidRequest, "a harness cannot emit %q events", eventType)
	}
	return h.run().emit(eventType, data)
}

// call makes a host callback: a request to teamster.host.<hostId>.<attemptId>.<call>,
// retried while no gateway answers, bounded by ctx (the attempt's deadline).
// No answer by the deadline is deadline_exceeded.
func (h *host) call(ctx context.Context, call string, req, reply bus.Envelope) error {
	r := h.run()
	if r.attempt.HostID == "" {
		return teamster.Errorf(teamster.CodeHarnessFailed, "the attempt has no hostId, so the host callback %s cannot be made", call)
	}
	subj, err := bus.HostSubject(r.attempt.HostID, r.attempt.AttemptID, call)
	if err != nil {
		return err
	}
	body, err := bus.Encode(req)
	if err != nil {
		return err
	}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond), backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(0))
	var msg *nats.Msg
	err = backoff.Retry(func() error {
		var rerr error
		msg, rerr = r.w.nc.RequestWithContext(ctx, subj, body)
		if rerr != nil && !errors.Is(rerr, nats.ErrNoResponders) && !errors.Is(rerr, nats.ErrTimeout) {
			return backoff.Permanent(rerr)
		}
		return rerr
	}, backoff.WithContext(bo, ctx))
	if err != nil {
		if ctx.Err() != nil {
			if cause := context.Cause(ctx); cause != nil && teamster.CodeOf(cause) != teamster.CodeInternal {
				return cause
			}
			return teamster.Errorf(teamster.CodeDeadlineExceeded, "host callback %s got no answer before the attempt's deadline", call)
		}
		return teamster.Errorf(teamster.CodeInternal, "host callback %s: %v", call, err)
	}
	if err := bus.Decode(msg.Data, reply); err != nil {
		return teamster.Errorf(teamster.CodeHarnessFailed, "host callback %s: bad reply: %v", call, err)
	}
	return nil
}

// Tool invokes a host tool.
func (h *host) Tool(ctx context.Context, c bus.ToolCall) (*bus.ToolReply, error) {
	c.V = bus.Version
	var rep bus.ToolReply
	if err := h.call(ctx, bus.HostCallTool, &c, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// ToolTerminal reports a tool call's terminal outcome.
func (h *host) ToolTerminal(ctx context.Context, t bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
	t.V = bus.Version
	var rep bus.ToolTerminalReply
	if err := h.call(ctx, bus.HostCallToolTerminal, &t, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// UserInput asks the gateway a blocking question.
func (h *host) UserInput(ctx context.Context, q bus.UserInput) (*bus.UserInputReply, error) {
	q.V = bus.Version
	var rep bus.UserInputReply
	if err := h.call(ctx, bus.HostCallUserInput, &q, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// ReportUsage adds one completed response's output tokens to the run total,
// once per response id, emits the cumulative usage event and tells the host.
// Non-positive counts emit nothing.
func (h *host) ReportUsage(ctx context.Context, responseID string, outputTokens int64) error {
	r := h.run()
	if outputTokens <= 0 || responseID == "" {
		return nil
	}
	r.mu.Lock()
	if r.usage[responseID] {
		r.mu.Unlock()
		return nil
	}
	if r.usage == nil {
		r.usage = map[string]bool{}
	}
	r.usage[responseID] = true
	r.tokens += outputTokens
	total := r.tokens
	r.mu.Unlock()
	if err := r.emit(bus.EventUsage, bus.UsageData{OutputTokens: total}); err != nil {
		return err
	}
	if r.attempt.HostID != "" {
		// Best effort: the usage event above is what the submitter sees.
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var rep bus.Reply
		if err := h.call(ctx, bus.HostCallUsage, &bus.UsageReport{V: bus.Version, ResponseID: responseID, OutputTokens: outputTokens}, &rep); err != nil {
			r.log().Debug("usage not reported to the host: " + err.Error())
		}
	}
	return nil
}
