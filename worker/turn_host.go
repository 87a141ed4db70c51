package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// The turn's host callbacks: what a harness asks of the gateway that
// submitted the attempt (tools, tool outcomes, questions, usage), through
// teamster.host.<hostId>.<attemptId>.<call>, and the events it emits.

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
	total, counted := r.usage.add(responseID, outputTokens)
	if !counted {
		return nil
	}
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

// usageTotal is a run's output tokens, summed over the responses reported,
// each response id counted once.
type usageTotal struct {
	mu     sync.Mutex
	seen   map[string]bool
	tokens int64
}

// add counts one response's tokens; it returns the new total, and false
// when the response was counted before.
func (u *usageTotal) add(responseID string, tokens int64) (int64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen[responseID] {
		return u.tokens, false
	}
	if u.seen == nil {
		u.seen = map[string]bool{}
	}
	u.seen[responseID] = true
	u.tokens += tokens
	return u.tokens, true
}

func (u *usageTotal) total() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tokens
}
