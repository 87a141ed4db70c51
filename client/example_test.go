package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/selection"
)

// The examples run against a real fleet (TestMain, in main_test.go, starts
// it): natsURL is its NATS address, and gateway a client on it, as a
// gateway keeps one for its life (Example shows how one is made). The
// fleet's harness is the scripted one: a prompt {"script": [...]} is played
// as steps (say, reason, sleep, tool, usage, awaitInjection, fail), any
// other prompt is echoed back.

// A gateway submits a user's turn, shows its events as they come, and keeps
// its one result.
func Example() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := c.Submit(ctx, &bus.Attempt{
		AgentID:    "main",
		SessionKey: "agent:main:telegram:alice",
		SessionID:  "sid-alice",
		StorePath:  "/var/lib/openclaw/sessions/alice.jsonl",
		Provider:   "openai",
		ModelID:    "gpt-5.6-sol",
		ModelProvider: &selection.Route{
			RuntimePolicy:             &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}},
			RequestTransportOverrides: selection.OverridesNone,
		},
		Prompt: `{"script":[{"say":"Hello!"},{"reason":"she asks about the weather"},{"say":"It is sunny."}]}`,
	})
	if err != nil {
		log.Fatal(err) // a *client.RejectedError when the router refused it
	}
	defer h.Close()
	if h.Reply.Status == bus.StatusFallback {
		return // no plugin harness fits: the gateway runs the turn itself
	}
	fmt.Println(h.Reply.Status, "by", h.Reply.HarnessID)
	for e := range h.Events() { // closed after the result event
		switch e.Type {
		case bus.EventPartial:
			var p struct{ Text string }
			if err := json.Unmarshal(e.Data, &p); err == nil {
				fmt.Println("partial:", p.Text)
			}
		default:
			fmt.Println(e.Type)
		}
	}
	r, err := h.Result(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.AssistantTexts)
	// Output:
	// accepted by codex
	// claimed
	// partial: Hello!
	// agent
	// partial: It is sunny.
	// result
	// ok [Hello! It is sunny.]
}

// turn is the attempt of one turn of session with prompt, prepared as
// Example prepares one.
func turn(session, prompt string) *bus.Attempt {
	return &bus.Attempt{
		AgentID: "main", SessionKey: session, SessionID: "sid-" + session, StorePath: "/var/lib/openclaw/sessions/" + session + ".jsonl",
		Provider: "openai", ModelID: "gpt-5.6-sol",
		ModelProvider: &selection.Route{
			RuntimePolicy:             &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}},
			RequestTransportOverrides: selection.OverridesNone,
		},
		Prompt: prompt,
	}
}

// A turn that fails still has exactly one result: its status and error say
// why. Result's own error is about the waiting (the context, a closed
// client), never about the turn.
func ExampleHandle_Result() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := gateway.Submit(ctx, turn("web-bob", `{"script":[{"say":"Let me see."},{"fail":"the model gave up"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	r, err := h.Result(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.Error.Code, r.Error.Message)
	// Output:
	// error harness_failed the model gave up
}

// A gateway that restarted has its turns' attempt ids, not their handles:
// it reads their durable results.
func ExampleClient_Result() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := gateway.Submit(ctx, turn("slack-carol", "what did I miss?"))
	if err != nil {
		log.Fatal(err)
	}
	id := h.AttemptID() // kept in the gateway's own store
	h.Close()

	r, err := gateway.WaitResult(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.AssistantTexts)

	_, err = gateway.Result(ctx, "01J9ZZZZZZZZZZZZZZZZZZZZZZ") // never submitted
	fmt.Println(errors.Is(err, client.ErrNoResult))
	// Output:
	// ok [what did I miss?]
	// true
}

// A refused submit is a *client.RejectedError: it carries the router's
// reply, with the selection record, and unwraps to the *teamster.Error.
func ExampleRejectedError() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := turn("web-dan", "hello")
	a.AgentHarnessID = "ghost" // pinned to a harness no worker hosts
	_, err := gateway.Submit(ctx, a)
	var rejected *client.RejectedError
	if errors.As(err, &rejected) {
		fmt.Println(rejected.Reply.Status, "asking for", rejected.Reply.Selection.Runtime)
	}
	fmt.Println(teamster.CodeOf(err), errors.Is(err, teamster.ErrHarnessNotRegistered))
	// Output:
	// rejected asking for ghost
	// harness_not_registered true
}

// A delegate plugin (here the voice transport, voice-call) continues a
// session whose owner locked its harness. Its attempt carries the session's
// exact stored facts; anything else is refused, naming the field.
func ExampleClient_SubmitAsDelegate() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const session = "voice-erin"
	run := func(h *client.Handle, err error) *bus.Result {
		if err != nil {
			log.Fatal(err)
		}
		defer h.Close()
		r, err := h.Result(ctx)
		if err != nil {
			log.Fatal(err)
		}
		return r
	}

	// The owner's turn pins the session to codex and locks its model
	// selection.
	owner := turn(session, "owner turn")
	owner.AgentHarnessID = "codex"
	owner.ModelSelectionLocked = true
	fmt.Println("owner:", run(gateway.Submit(ctx, owner)).Status)

	voice := turn(session, "said on the phone")
	voice.AgentHarnessID = "codex"
	voice.ModelSelectionLocked = true
	voice.AgentHarnessRuntimeOverride = "codex"
	r := run(gateway.SubmitAsDelegate(ctx, "voice-call", voice))
	fmt.Println("voice-call:", r.Status, r.AssistantTexts)

	voice.SessionID = "another-session"
	_, err := gateway.SubmitAsDelegate(ctx, "voice-call", voice)
	fmt.Println("voice-call, wrong sessionId:", teamster.CodeOf(err))
	// Output:
	// owner: ok
	// voice-call: ok [said on the phone]
	// voice-call, wrong sessionId: delegation_denied
}

// The user types while the agent works: the gateway steers the running turn
// with the new input instead of queueing a turn after it. The injection's
// fate arrives as injection events of the turn.
func ExampleClient_Inject() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const session = "web-frank"
	h, err := gateway.Submit(ctx, turn(session, `{"script":[{"say":"Drafting."},{"awaitInjection":30000},{"say":"Done."}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	for e := range h.Events() {
		if e.Type == bus.EventPartial {
			break // the turn is running
		}
	}

	rep, err := gateway.Inject(ctx, bus.InjectRequest{SessionKey: session, Text: "make it shorter"})
	if err != nil {
		log.Fatal(err) // no_active_run when the turn has ended meanwhile
	}
	fmt.Println("inject:", rep.Status)
	for e := range h.Events() {
		if e.Type == bus.EventInjection {
			var d bus.InjectionData
			if err := json.Unmarshal(e.Data, &d); err == nil && d.InjectionID == rep.InjectionID {
				fmt.Println("injection:", d.State)
			}
		}
	}
	r, err := h.Result(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.AssistantTexts)
	// Output:
	// inject: accepted
	// injection: accepted
	// injection: committed
	// ok [Drafting. make it shorter Done.]
}

// The user pressed stop: the turn ends with status cancelled.
func ExampleClient_Cancel() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := gateway.Submit(ctx, turn("web-gina", `{"script":[{"say":"Thinking."},{"sleep":60000}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	for e := range h.Events() {
		if e.Type == bus.EventPartial {
			break // the turn is running
		}
	}

	if err := gateway.Cancel(ctx, h.AttemptID(), "the user pressed stop"); err != nil {
		log.Fatal(err) // no_active_run when it was not running (queued, ended)
	}
	r, err := h.Result(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.Error.Code)
	// Output:
	// cancelled cancelled
}

// The user typed /new: the gateway resets the session to a new sessionId,
// and its next turn starts a fresh native thread. Session operations are
// the owner's: a delegate's is refused.
func ExampleClient_SessionOp() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const session = "telegram-hana"
	run := func(a *bus.Attempt) *bus.Result {
		h, err := gateway.Submit(ctx, a)
		if err != nil {
			log.Fatal(err)
		}
		defer h.Close()
		r, err := h.Result(ctx)
		if err != nil {
			log.Fatal(err)
		}
		return r
	}
	run(turn(session, "first"))
	fmt.Println(string(run(turn(session, "second")).NativeSession))

	if err := gateway.SessionOp(ctx, bus.SessionReset, bus.SessionOp{SessionKey: session, SessionID: "sid-hana-2"}); err != nil {
		log.Fatal(err) // session_busy while a turn of the session runs
	}
	next := turn(session, "after /new")
	next.SessionID = "sid-hana-2"
	fmt.Println(string(run(next).NativeSession))

	err := gateway.SessionOpAsDelegate(ctx, "voice-call", bus.SessionReset, bus.SessionOp{SessionKey: session})
	fmt.Println("a delegate's reset:", teamster.CodeOf(err))

	// The user deleted the chat.
	if err := gateway.SessionOp(ctx, bus.SessionDelete, bus.SessionOp{SessionKey: session}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// {"thread":"scripted-sid-telegram-hana","turns":2}
	// {"thread":"scripted-sid-hana-2","turns":1}
	// a delegate's reset: owner_only
}

// A linked chat steers the turns of its session with source-bound input:
// the gateway grants the chat's source a generation, and the chat's input
// carries it. Once the chat is unlinked (the source revoked), its input is
// refused, in flight or new; the gateway's own input still goes through.
func ExampleClient_GrantSource() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const session = "telegram-ivan"
	// Any generation higher than the last revoked one; the clock rises.
	chat := bus.SourceRef{ID: "telegram-chat-7", Generation: time.Now().UnixMilli()}
	if err := gateway.GrantSource(ctx, chat.ID, chat.Generation); err != nil {
		log.Fatal(err)
	}
	steer := func(req bus.InjectRequest) {
		h, err := gateway.Submit(ctx, turn(session, `{"script":[{"say":"Listening."},{"awaitInjection":30000},{"say":"Noted."}]}`))
		if err != nil {
			log.Fatal(err)
		}
		defer h.Close()
		for e := range h.Events() {
			if e.Type == bus.EventPartial {
				break // the turn is running
			}
		}
		if _, err := gateway.Inject(ctx, req); err != nil {
			fmt.Println("refused:", teamster.CodeOf(err))
			// The gateway's own input ends the wait.
			if _, err := gateway.Inject(ctx, bus.InjectRequest{SessionKey: session, Text: "(from the gateway)"}); err != nil {
				log.Fatal(err)
			}
		}
		r, err := h.Result(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Status, r.AssistantTexts)
	}
	fromChat := bus.InjectRequest{SessionKey: session, Text: "from the chat", AuthorityKind: bus.AuthoritySourceBound, Source: &chat}
	steer(fromChat)

	if err := gateway.RevokeSource(ctx, chat.ID); err != nil {
		log.Fatal(err)
	}
	steer(fromChat)
	// Output:
	// ok [Listening. from the chat Noted.]
	// refused: source_revoked
	// ok [Listening. (from the gateway) Noted.]
}

// The gateway keeps the tools: the harness, on whichever worker runs the
// turn, calls them back through the fleet, on the host id the attempt
// names.
func ExampleClient_ServeHost() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tools := client.NewTools().Register("weather", func(ctx context.Context, args json.RawMessage) (any, error) {
		var a struct{ City string }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		return map[string]string{"city": a.City, "sky": "sunny"}, nil
	})
	srv, err := gateway.ServeHost("gw-examples", tools)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	a := turn("telegram-jo", `{"script":[{"tool":{"name":"weather","args":{"city":"Lisbon"}}},{"usage":12},{"say":"Sunny in Lisbon."}]}`)
	a.HostID = "gw-examples"
	a.Tools = []bus.Tool{{Name: "weather", Description: "today's weather in a city"}}
	h, err := gateway.Submit(ctx, a)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	r, err := h.Result(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.AssistantTexts)
	fmt.Println("output tokens:", tools.Reported(h.AttemptID()))
	tools.Forget(h.AttemptID()) // the turn is over
	// Output:
	// ok [{"city":"Lisbon","sky":"sunny"} Sunny in Lisbon.]
	// output tokens: 12
}
