// Package claudetest is what tests of the claude harness need around the
// real Claude Code CLI: a scripted stand-in for the Anthropic Messages API
// (enough of its streaming form for the CLI to complete turns, call tools and
// think) and the installed claude binary (tests fail, never skip, when it is
// missing).
package claudetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster/harness/internal/endpointtest"
)

// Model is the model the tests' turns run with; requests for any other
// model (the CLI's own side requests, should a version make one) are
// answered without consuming the script.
const Model = "claude-teamster-test"

// Reply is one scripted model response: optional thinking, then text or a
// call of a named tool, with the output tokens its usage reports.
type Reply struct {
	// Thinking is a thinking block before the rest (none when empty).
	Thinking string
	// Text is the assistant text (after the tool call when Call is set).
	Text string
	// Call makes the response end with a tool_use block.
	Call *Call
	// OutputTokens is the usage the response reports (default 5).
	OutputTokens int64
	// Hold keeps the stream open after message_start until the client goes
	// away (Request.Aborted), Release is called or HoldFor passes (default
	// 60s).
	Hold    bool
	HoldFor time.Duration
}

// Call is a tool call the model makes. Name is the tool's name as the test
// knows it; the endpoint calls the offered tool with that name or ending in
// "__<Name>" (the CLI offers MCP tools as mcp__<server>__<tool>).
type Call struct {
	Name string
	Args any
}

// Request is one request the endpoint received.
type Request struct {
	// Path is the URL path (/v1/messages).
	Path string
	// Model is the request's model.
	Model string
	// APIKey is the request's x-api-key header.
	APIKey string
	// Body is the request body as sent.
	Body json.RawMessage
	// ResponseID is the message id the endpoint gave its answer.
	ResponseID string
	// Aborted says the client went away while the reply was held.
	Aborted bool
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

func (r Request) messages() []message {
	var b struct {
		Messages []message `json:"messages"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Messages
}

func blocks(raw json.RawMessage) []block {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	var bs []block
	_ = json.Unmarshal(raw, &bs)
	return bs
}

// Texts are the texts of the request's messages, in order: text and
// thinking blocks, and the text of tool results.
func (r Request) Texts() []string {
	var out []string
	for _, m := range r.messages() {
		for _, b := range blocks(m.Content) {
			switch b.Type {
			case "text":
				out = append(out, b.Text)
			case "thinking":
				out = append(out, b.Thinking)
			case "tool_result":
				for _, c := range blocks(b.Content) {
					out = append(out, c.Text)
				}
			}
		}
	}
	return out
}

// Has reports whether any message text of the request contains s.
func (r Request) Has(s string) bool {
	for _, t := range r.Texts() {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}

// Tools are the names of the tools the request offers the model.
func (r Request) Tools() []string {
	var b struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(r.Body, &b)
	var out []string
	for _, t := range b.Tools {
		out = append(out, t.Name)
	}
	return out
}

// ToolResult is the text of the request's last tool_result block: what the
// model is told a tool call returned.
func (r Request) ToolResult() string {
	var out string
	for _, m := range r.messages() {
		for _, b := range blocks(m.Content) {
			if b.Type == "tool_result" {
				var parts []string
				for _, c := range blocks(b.Content) {
					parts = append(parts, c.Text)
				}
				out = strings.Join(parts, "")
			}
		}
	}
	return out
}

// Endpoint is a scripted Anthropic Messages endpoint: POST /v1/messages
// (with or without ?beta=true) answers each request for Model with the next
// Reply as a server-sent-events stream (message_start, content_block_start,
// content_block_delta, content_block_stop, message_delta with usage,
// message_stop). Requests beyond the script are answered with the text
// "unscripted". count_tokens requests get a count; other paths 404. It
// records every request.
type Endpoint struct {
	srv *httptest.Server
	rec *endpointtest.Recorder[Reply, Request] // for Model

	mu     sync.Mutex
	others []Request // anything else
}

// NewEndpoint starts an endpoint playing replies; it stops when t ends.
func NewEndpoint(t testing.TB, replies ...Reply) *Endpoint {
	t.Helper()
	e := &Endpoint{rec: endpointtest.NewRecorder[Reply, Request](90*time.Second, replies)}
	e.srv = e.rec.Serve(t, e.serve)
	return e
}

// BaseURL is the ANTHROPIC_BASE_URL of the endpoint.
func (e *Endpoint) BaseURL() string { return e.srv.URL }

// Script appends replies to the script.
func (e *Endpoint) Script(replies ...Reply) { e.rec.Script(replies...) }

// Release ends every hold, now and later.
func (e *Endpoint) Release() { e.rec.Release() }

// Requests returns the turn requests (for Model) received so far.
func (e *Endpoint) Requests() []Request { return e.rec.Requests() }

// Others returns the requests that were not turn requests.
func (e *Endpoint) Others() []Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Request(nil), e.others...)
}

// WaitRequests waits until n turn requests have arrived and returns them.
func (e *Endpoint) WaitRequests(t testing.TB, n int) []Request {
	t.Helper()
	return e.rec.WaitRequests(t, n)
}

// WaitAborted waits until turn request i (from 0) was abandoned by the
// client.
func (e *Endpoint) WaitAborted(t testing.TB, i int) {
	t.Helper()
	e.rec.WaitAborted(t, i, func(r Request) bool { return r.Aborted })
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/messages") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type":"error","error":{"type":"not_found_error","message":"not served by the teamster test endpoint"}}`)
		return
	}
	var body json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	var head struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &head)
	rq := Request{Path: r.URL.Path, Model: head.Model, APIKey: r.Header.Get("X-Api-Key"), Body: body}
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		e.mu.Lock()
		e.others = append(e.others, rq)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"input_tokens":100}`)
		return
	}
	if head.Model != Model {
		e.mu.Lock()
		rq.ResponseID = fmt.Sprintf("msg_side_%d", len(e.others)+1)
		e.others = append(e.others, rq)
		e.mu.Unlock()
		e.stream(w, r, rq, Reply{Text: "ok"}, func() {})
		return
	}
	i, reply := e.rec.Take(Reply{Text: "unscripted"}, func(i int) Request {
		rq.ResponseID = fmt.Sprintf("msg_test_%d", i+1)
		return rq
	})
	e.stream(w, r, rq, reply, func() { e.rec.Update(i, func(rq *Request) { rq.Aborted = true }) })
}

func (e *Endpoint) stream(w http.ResponseWriter, r *http.Request, rq Request, reply Reply, aborted func()) {
	events := endpointtest.Events(w)
	send := func(event string, data map[string]any) {
		data["type"] = event
		events(event, data)
	}
	send("message_start", map[string]any{"message": map[string]any{"id": rq.ResponseID, "type": "message", "role": "assistant",
		"model": rq.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 10, "output_tokens": 1}}})
	if reply.Hold {
		d := reply.HoldFor
		if d == 0 {
			d = 60 * time.Second
		}
		if !e.rec.Hold(r.Context(), d) {
			aborted()
			return
		}
	}
	idx := 0
	if reply.Thinking != "" {
		send("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
		send("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "thinking_delta", "thinking": reply.Thinking}})
		send("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "signature_delta", "signature": "sig-test"}})
		send("content_block_stop", map[string]any{"index": idx})
		idx++
	}
	if reply.Text != "" {
		send("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, part := range endpointtest.SplitText(reply.Text) {
			send("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "text_delta", "text": part}})
		}
		send("content_block_stop", map[string]any{"index": idx})
		idx++
	}
	stop := "end_turn"
	if c := reply.Call; c != nil {
		stop = "tool_use"
		name := c.Name
		for _, t := range rq.Tools() {
			if t == c.Name || strings.HasSuffix(t, "__"+c.Name) {
				name = t
			}
		}
		args, _ := json.Marshal(c.Args)
		send("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "tool_use",
			"id": "toolu_" + rq.ResponseID, "name": name, "input": map[string]any{}}})
		send("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(args)}})
		send("content_block_stop", map[string]any{"index": idx})
	}
	out := reply.OutputTokens
	if out == 0 {
		out = 5
	}
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out}})
	send("message_stop", map[string]any{})
}
