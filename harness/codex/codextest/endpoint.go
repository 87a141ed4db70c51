// Package codextest is what tests of the codex harness need around the real
// app-server: a scripted stand-in for the model endpoint (enough of the
// OpenAI Responses streaming API for the app-server to complete turns), a
// CODEX_HOME whose config points the app-server at it, and the installed
// codex binary (tests fail, never skip, when it is missing).
package codextest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster/harness/internal/endpointtest"
)

// Reply is one scripted model response: text, or a call of a named tool,
// with the output tokens its usage reports.
type Reply struct {
	// Text is the assistant message (ignored when Call is set).
	Text string
	// Call makes the response a function call instead of a message.
	Call *Call
	// OutputTokens is the usage the response reports (default 5).
	OutputTokens int64
	// Hold keeps the stream open after response.created until the client
	// goes away (Request.Aborted) or Release is called; HoldFor bounds it
	// (default 30s).
	Hold    bool
	HoldFor time.Duration
}

// Call is a function call the model makes.
type Call struct {
	Name string
	Args any
}

// Request is one request the endpoint received.
type Request struct {
	// Path is the URL path (/v1/responses).
	Path string
	// Body is the request body as sent.
	Body json.RawMessage
	// ResponseID is the id the endpoint gave its answer.
	ResponseID string
	// Aborted says the client went away while the reply was held.
	Aborted bool
}

// Input is a request's input items.
func (r Request) Input() []InputItem {
	var b struct {
		Input []InputItem `json:"input"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Input
}

// Tools are the names of the tools a request offers the model.
func (r Request) Tools() []string {
	var b struct {
		Tools []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(r.Body, &b)
	var out []string
	for _, t := range b.Tools {
		if t.Name != "" {
			out = append(out, t.Name)
		}
	}
	return out
}

// Texts are the texts of a request's input, in order: each message's text
// parts, and each function call output.
func (r Request) Texts() []string {
	var out []string
	for _, it := range r.Input() {
		out = append(out, it.Texts()...)
	}
	return out
}

// CallOutput is the text of the request's last function call output: what
// the model is told a tool call returned.
func (r Request) CallOutput() string {
	var out string
	for _, it := range r.Input() {
		if it.Type == "function_call_output" {
			out = strings.Join(it.Texts(), "")
		}
	}
	return out
}

// Has reports whether any input text of the request contains s.
func (r Request) Has(s string) bool {
	for _, t := range r.Texts() {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}

// InputItem is one input item of a Responses request.
type InputItem struct {
	Type    string `json:"type"`
	Role    string `json:"role,omitempty"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content,omitempty"`
	Name      string          `json:"name,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
}

// Texts are the item's texts: its content parts, or its output.
func (it InputItem) Texts() []string {
	var out []string
	for _, c := range it.Content {
		out = append(out, c.Text)
	}
	if len(it.Output) > 0 {
		var s string
		if json.Unmarshal(it.Output, &s) == nil {
			out = append(out, s)
		} else {
			out = append(out, string(it.Output))
		}
	}
	return out
}

// Endpoint is a scripted model endpoint: POST /v1/responses answers each
// request with the next Reply as a server-sent-events stream
// (response.created, response.output_item.added, response.output_text.delta,
// response.output_item.done, response.completed with usage). Requests beyond
// the script are answered with the text "unscripted". It records every
// request.
type Endpoint struct {
	srv *httptest.Server
	rec *endpointtest.Recorder[Reply, Request]
}

// NewEndpoint starts an endpoint playing replies; it stops when t ends.
func NewEndpoint(t testing.TB, replies ...Reply) *Endpoint {
	t.Helper()
	e := &Endpoint{rec: endpointtest.NewRecorder[Reply, Request](60*time.Second, replies)}
	e.srv = e.rec.Serve(t, e.serve)
	return e
}

// BaseURL is the base_url of a model provider using the endpoint.
func (e *Endpoint) BaseURL() string { return e.srv.URL + "/v1" }

// Script appends replies to the script.
func (e *Endpoint) Script(replies ...Reply) { e.rec.Script(replies...) }

// Release ends every hold, now and later.
func (e *Endpoint) Release() { e.rec.Release() }

// Requests returns the requests received so far.
func (e *Endpoint) Requests() []Request { return e.rec.Requests() }

// WaitRequests waits until n requests have arrived and returns them.
func (e *Endpoint) WaitRequests(t testing.TB, n int) []Request {
	t.Helper()
	return e.rec.WaitRequests(t, n)
}

// WaitAborted waits until request i (from 0) was abandoned by the client.
func (e *Endpoint) WaitAborted(t testing.TB, i int) {
	t.Helper()
	e.rec.WaitAborted(t, i, func(r Request) bool { return r.Aborted })
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		http.NotFound(w, r)
		return
	}
	var body json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	id := ""
	i, reply := e.rec.Take(Reply{Text: "unscripted"}, func(i int) Request {
		id = fmt.Sprintf("resp_%d", i+1)
		return Request{Path: r.URL.Path, Body: body, ResponseID: id}
	})
	send := endpointtest.Events(w)
	send("response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	if reply.Hold {
		d := reply.HoldFor
		if d == 0 {
			d = 30 * time.Second
		}
		if !e.rec.Hold(r.Context(), d) {
			e.rec.Update(i, func(rq *Request) { rq.Aborted = true })
			return
		}
	}
	n := i + 1
	if c := reply.Call; c != nil {
		args, _ := json.Marshal(c.Args)
		item := map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", n), "call_id": fmt.Sprintf("call_%d", n),
			"name": c.Name, "arguments": string(args)}
		added := map[string]any{"type": "function_call", "id": item["id"], "call_id": item["call_id"], "name": c.Name, "arguments": ""}
		send("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": added})
		send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	} else {
		mid := fmt.Sprintf("msg_%d", n)
		send("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0,
			"item": map[string]any{"type": "message", "id": mid, "role": "assistant", "content": []any{}}})
		for _, part := range endpointtest.SplitText(reply.Text) {
			send("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": mid,
				"output_index": 0, "content_index": 0, "delta": part})
		}
		send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0,
			"item": map[string]any{"type": "message", "id": mid, "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": reply.Text, "annotations": []any{}}}}})
	}
	out := reply.OutputTokens
	if out == 0 {
		out = 5
	}
	send("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{"id": id,
		"usage": map[string]any{"input_tokens": 10, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 10 + out}}})
}
