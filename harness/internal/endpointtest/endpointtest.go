// Package endpointtest is the part of the harness tests' scripted model
// endpoints (codextest's Responses API, claudetest's Messages API) that does
// not depend on the API they imitate: the script of replies and the record
// of requests (Recorder), waiting for requests, holding a reply until
// released, and writing server-sent events.
package endpointtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Recorder plays a script of replies (Rep) to the requests (Req) of an
// endpoint, one reply per request in order, and records the requests.
type Recorder[Rep, Req any] struct {
	patience time.Duration // how long the waits wait

	mu       sync.Mutex
	script   []Rep
	requests []Req
	arrived  chan struct{} // signalled on every request
	release  chan struct{}
}

// NewRecorder returns a recorder playing replies whose waits give up after
// patience.
func NewRecorder[Rep, Req any](patience time.Duration, replies []Rep) *Recorder[Rep, Req] {
	return &Recorder[Rep, Req]{patience: patience, script: replies, arrived: make(chan struct{}, 1), release: make(chan struct{})}
}

// Serve starts a server for h; it stops (every hold released) when t ends.
func (r *Recorder[Rep, Req]) Serve(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		r.Release()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// Script appends replies to the script.
func (r *Recorder[Rep, Req]) Script(replies ...Rep) {
	r.mu.Lock()
	r.script = append(r.script, replies...)
	r.mu.Unlock()
}

// Release ends every hold, now and later.
func (r *Recorder[Rep, Req]) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.release:
	default:
		close(r.release)
	}
}

// Take records the next request, req(i) for the i-th (from 0), and returns
// i and its reply: the script's, or unscripted beyond the script.
func (r *Recorder[Rep, Req]) Take(unscripted Rep, req func(i int) Req) (int, Rep) {
	r.mu.Lock()
	i := len(r.requests)
	reply := unscripted
	if i < len(r.script) {
		reply = r.script[i]
	}
	r.requests = append(r.requests, req(i))
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	return i, reply
}

// Update changes the record of request i.
func (r *Recorder[Rep, Req]) Update(i int, f func(*Req)) {
	r.mu.Lock()
	f(&r.requests[i])
	r.mu.Unlock()
}

// Hold keeps a reply back until Release is called or d passes (true), or
// the client goes away (ctx ends: false).
func (r *Recorder[Rep, Req]) Hold(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.release:
	case <-time.After(d):
	}
	return true
}

// Requests returns the requests recorded so far.
func (r *Recorder[Rep, Req]) Requests() []Req {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Req(nil), r.requests...)
}

// WaitRequests waits until n requests have arrived and returns them.
func (r *Recorder[Rep, Req]) WaitRequests(t testing.TB, n int) []Req {
	t.Helper()
	deadline := time.After(r.patience)
	for {
		if rs := r.Requests(); len(rs) >= n {
			return rs
		}
		select {
		case <-r.arrived:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("the model endpoint got %d requests, want %d", len(r.Requests()), n)
		}
	}
}

// WaitAborted waits until request i (from 0) was abandoned by the client,
// as aborted reads its record.
func (r *Recorder[Rep, Req]) WaitAborted(t testing.TB, i int, aborted func(Req) bool) {
	t.Helper()
	deadline := time.Now().Add(r.patience)
	for time.Now().Before(deadline) {
		if rs := r.Requests(); len(rs) > i && aborted(rs[i]) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the client did not abandon request %d", i)
}

// Events starts a server-sent-events answer on w and returns what sends
// one event (its data as JSON), flushed at once.
func Events(w http.ResponseWriter) func(event string, data any) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if fl != nil {
			fl.Flush()
		}
	}
}

// SplitText cuts text in two deltas (when it has a space), so that streams
// have more than one.
func SplitText(s string) []string {
	if i := strings.Index(s, " "); i > 0 {
		return []string{s[:i+1], s[i+1:]}
	}
	return []string{s}
}
