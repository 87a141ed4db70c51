package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/selection"
)

// demoTurn is one attempt of the demo and what it should end as.
type demoTurn struct {
	title  string
	prompt string
	tweak  func(a *bus.Attempt)
	// cancelAfterClaim cancels the attempt once a worker claims it.
	cancelAfterClaim bool
	// want is the expected reply status, and for accepted turns the result
	// status and error code.
	wantReply  string
	wantStatus teamster.Status
	wantCode   teamster.Code
}

type demoSession struct {
	key      string
	provider string
	turns    []demoTurn
}

func script(steps ...string) string { return `{"script":[` + strings.Join(steps, ",") + `]}` }

func demoScenario() []demoSession {
	ok := func(title, prompt string) demoTurn {
		return demoTurn{title: title, prompt: prompt, wantReply: bus.StatusAccepted, wantStatus: teamster.StatusOK}
	}
	return []demoSession{
		{key: "demo:alice", provider: "openai", turns: []demoTurn{
			ok("echo", "Hello, fleet"),
			ok("reason, report usage, answer", script(`{"reason":"the user greeted us"}`, `{"usage":42}`, `{"say":"Hi Alice!"}`, `{"usage":17}`, `{"say":"How can I help?"}`)),
			ok("a slower turn, still in order", script(`{"sleep":300}`, `{"say":"third turn done"}`)),
			ok("calls the gateway's clock tool through the fleet", script(`{"say":"let me check the time"}`, `{"tool":{"name":"clock"}}`)),
		}},
		{key: "demo:bob", provider: "anthropic", turns: []demoTurn{
			ok("echo on claude-cli", "Hello from Bob"),
			{title: "a failing script", prompt: script(`{"say":"trying"}`, `{"fail":"the tool chain broke"}`),
				wantReply: bus.StatusAccepted, wantStatus: teamster.StatusError, wantCode: teamster.CodeHarnessFailed},
			ok("the next turn runs after the failure", "still here"),
		}},
		{key: "demo:carol", provider: "openai", turns: []demoTurn{
			{title: "runs past its 500 ms timeout", prompt: script(`{"say":"thinking hard"}`, `{"sleep":5000}`),
				tweak: func(a *bus.Attempt) { a.TimeoutMs = 500 }, wantReply: bus.StatusAccepted, wantStatus: teamster.StatusTimeout, wantCode: teamster.CodeDeadlineExceeded},
		}},
		{key: "demo:dave", provider: "openai", turns: []demoTurn{
			{title: "cancelled while running", prompt: script(`{"say":"long job started"}`, `{"sleep":10000}`), cancelAfterClaim: true,
				wantReply: bus.StatusAccepted, wantStatus: teamster.StatusCancelled, wantCode: teamster.CodeCancelled},
		}},
		{key: "demo:erin", provider: "openai", turns: []demoTurn{
			{title: "pinned to a harness no worker hosts: fails closed", prompt: "hi",
				tweak: func(a *bus.Attempt) { a.AgentHarnessID = "ghost" }, wantReply: bus.StatusRejected, wantCode: teamster.CodeHarnessNotRegistered},
		}},
		{key: "demo:frank", provider: "mistral", turns: []demoTurn{
			{title: "no harness supports the route: the gateway runs it", prompt: "hi", wantReply: bus.StatusFallback},
		}},
	}
}

// demoRun is what happened to one turn.
type demoRun struct {
	turn   demoTurn
	reply  *bus.SubmitReply
	events []bus.Event
	result *bus.Result
	start  time.Time
	took   time.Duration
	err    error
}

// playDemo submits every session's turns in order, all sessions at once,
// follows each attempt to its result, prints the story session by session,
// and fails unless every turn ended as expected.
func playDemo(ctx context.Context, out io.Writer, natsURL string, login demoLogin) error {
	nc, err := nats.Connect(natsURL, append([]nats.Option{nats.Name("teamster-demo")}, login.Options...)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithGateway(login.Gateway))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	sessions := demoScenario()
	runs := make([][]*demoRun, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		runs[i] = make([]*demoRun, len(s.turns))
		// Submit the session's turns in order; they run in that order.
		handles := make([]*client.Handle, len(s.turns))
		for k, t := range s.turns {
			a := demoAttempt(s, t)
			r := &demoRun{turn: t, start: time.Now()}
			runs[i][k] = r
			h, err := c.Submit(ctx, a)
			var rejected *client.RejectedError
			switch {
			case h != nil:
				r.reply = h.Reply
			case errors.As(err, &rejected):
				r.reply = rejected.Reply // a rejection has no handle
				continue
			}
			if err != nil {
				r.err = err
				continue
			}
			handles[k] = h
		}
		for k, h := range handles {
			if h == nil || h.Reply.Status != bus.StatusAccepted {
				continue
			}
			wg.Add(1)
			go func(r *demoRun, h *client.Handle) {
				defer wg.Done()
				defer h.Close()
				follow(ctx, c, r, h)
			}(runs[i][k], h)
		}
	}
	wg.Wait()
	failed := 0
	for i, s := range sessions {
		if err := checkOrder(runs[i]); err != nil {
			fmt.Fprintf(out, "✗ session %s: %v\n", s.key, err)
			failed++
		}
		fmt.Fprintf(out, "── session %s (%s) %s\n", s.key, s.provider, strings.Repeat("─", max(0, 50-len(s.key)-len(s.provider))))
		for k, r := range runs[i] {
			if !printDemoRun(out, k+1, r) {
				failed++
			}
		}
		fmt.Fprintln(out)
	}
	if failed > 0 {
		return fmt.Errorf("demo: %d attempts did not end as expected", failed)
	}
	fmt.Fprintln(out, "demo: every attempt ended as expected, and every session ran its turns in submission order (their fences increase).")
	return nil
}

func demoAttempt(s demoSession, t demoTurn) *bus.Attempt {
	compatible := map[string][]string{"openai": {"codex"}, "anthropic": {"claude-cli"}}[s.provider]
	a := &bus.Attempt{
		V: bus.Version, AgentID: "main", SessionKey: s.key, SessionID: "sid-" + strings.TrimPrefix(s.key, "demo:"),
		StorePath: "/var/lib/openclaw/sessions/" + strings.TrimPrefix(s.key, "demo:") + ".jsonl",
		Provider:  s.provider, ModelID: map[string]string{"openai": "gpt-5.6-sol", "anthropic": "claude-opus-5", "mistral": "mistral-large"}[s.provider],
		Prompt: t.prompt, TimeoutMs: 30_000, HostID: devHostID,
		Tools: []bus.Tool{{Name: "clock", Description: "the gateway's clock"}, {Name: "echo", Description: "returns its arguments"}},
	}
	if compatible != nil {
		a.ModelProvider = &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: compatible}, RequestTransportOverrides: selection.OverridesNone}
	}
	if t.tweak != nil {
		t.tweak(a)
	}
	return a
}

// follow collects a run's events and result, cancelling it after the claim
// when the turn asks for that.
func follow(ctx context.Context, c *client.Client, r *demoRun, h *client.Handle) {
	for e := range h.Events() {
		r.events = append(r.events, e)
		if e.Type == bus.EventPartial && r.turn.cancelAfterClaim {
			if err := c.Cancel(ctx, h.AttemptID(), "the user pressed stop"); err != nil && !errors.Is(err, teamster.ErrNoActiveRun) {
				r.err = err
			}
		}
	}
	r.result, r.err = h.Result(ctx)
	r.took = time.Since(r.start)
}

// printDemoRun prints one turn and reports whether it ended as expected.
func printDemoRun(out io.Writer, n int, r *demoRun) bool {
	fmt.Fprintf(out, "turn %d  %s\n", n, r.turn.title)
	if r.reply == nil {
		fmt.Fprintf(out, "  error      %v\n  ✗ expected %s\n", r.err, r.turn.wantReply)
		return false
	}
	fmt.Fprintf(out, "  attempt    %s  prompt %q\n", r.reply.AttemptID, clip(r.turn.prompt, 60))
	if r.reply.Selection != nil {
		fmt.Fprintf(out, "  selection  %s\n", selectionLine(r.reply.Selection))
	}
	ok := r.reply.Status == r.turn.wantReply
	switch r.reply.Status {
	case bus.StatusRejected:
		fmt.Fprintf(out, "  rejected   %s\n", r.reply.Error)
		ok = ok && r.reply.Error != nil && r.reply.Error.Code == r.turn.wantCode
	case bus.StatusFallback:
		fmt.Fprintln(out, "  fallback   no plugin harness supports the route; the gateway runs the turn itself")
	case bus.StatusAccepted:
		for _, e := range r.events {
			if e.Type == bus.EventResult {
				continue
			}
			fmt.Fprintf(out, "  #%-2d %s\n", e.Seq, describeEvent(e))
		}
		if r.result == nil {
			fmt.Fprintf(out, "  no result: %v\n", r.err)
			return false
		}
		printResult(out, r.result, r.took)
		ok = ok && r.result.Status == r.turn.wantStatus && (r.turn.wantCode == "" || (r.result.Error != nil && r.result.Error.Code == r.turn.wantCode))
	}
	if !ok {
		fmt.Fprintf(out, "  ✗ expected %s %s %s\n", r.turn.wantReply, r.turn.wantStatus, r.turn.wantCode)
	}
	return ok
}

// checkOrder checks that a session's accepted turns ran in submission order:
// their fences (<epoch>:<n>, n counting the session's leases) increase.
func checkOrder(runs []*demoRun) error {
	last := int64(0)
	for i, r := range runs {
		if r.result == nil || r.result.Fence == "" {
			continue
		}
		_, n, _ := strings.Cut(r.result.Fence, ":")
		var v int64
		if _, err := fmt.Sscan(n, &v); err != nil {
			return fmt.Errorf("turn %d: fence %q", i+1, r.result.Fence)
		}
		if v <= last {
			return fmt.Errorf("turn %d ran under fence %s, not after the turn before it", i+1, r.result.Fence)
		}
		last = v
	}
	return nil
}
