package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sirupsen/logrus"
)

// The app-server speaks JSON-RPC without the "jsonrpc" member, one JSON
// object per line on stdin and stdout: requests {id, method, params},
// responses {id, result} or {id, error: {code, message}}, notifications
// {method, params} without id. The server sends requests too (tool calls,
// approvals) and expects a response with the id it chose (a number or a
// string).

// maxLine bounds one message from the app-server; a longer line ends the
// connection (and with it the process).
const maxLine = 64 << 20

// JSON-RPC error codes the harness sends.
const (
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
)

// message is any message from the app-server.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

func (m *message) isRequest() bool { return m.Method != "" && len(m.ID) > 0 }

// rpcError is a JSON-RPC error: the app-server refused a request. Nothing
// the request asked for happened.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("app-server error %d: %s", e.Code, e.Message) }

// Errors of calls that did not get an answer.
var (
	// errGuardRefused: the call's guard said no, so nothing was written.
	errGuardRefused = errors.New("the request was not sent: its guard refused it")
	// errConnClosed: the connection was closed before the request was
	// written.
	errConnClosed = errors.New("the app-server connection is closed")
)

// errUnanswered wraps why a request that was written got no answer (the
// process exited, the caller gave up): whether it took effect is unknown.
type errUnanswered struct{ err error }

func (e *errUnanswered) Error() string {
	return "the app-server did not answer: " + e.err.Error()
}
func (e *errUnanswered) Unwrap() error { return e.err }

// traceFunc observes every message's direction ("send" or "recv") and
// method; tests use it to see the protocol. Responses have no method and are
// not traced.
type traceFunc func(dir, method string)

// conn is one JSON-RPC connection to an app-server. Calls may be made from
// any goroutine. Notifications and server requests that carry a threadId go
// to the mailbox subscribed for that thread; server requests for a thread
// nobody subscribed are refused, other notifications dropped.
type conn struct {
	w     io.Writer
	log   logrus.FieldLogger
	trace traceFunc

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	next    int64
	pending map[int64]chan *message
	threads map[string]*mailbox
	closed  bool
	err     error

	done chan struct{} // closed when the reader stopped
}

func newConn(w io.Writer, r io.Reader, log logrus.FieldLogger, trace traceFunc) *conn {
	c := &conn{w: w, log: log, trace: trace, pending: map[int64]chan *message{},
		threads: map[string]*mailbox{}, done: make(chan struct{})}
	go c.read(r)
	return c
}

// Done is closed when the connection ended (the process closed its output).
func (c *conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended, once Done is closed.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// read delivers every message until the output ends.
func (c *conn) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			c.log.WithError(err).Warn("codex: a line from the app-server is not a JSON-RPC message; ignored")
			continue
		}
		c.dispatch(&m)
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	c.mu.Lock()
	c.closed = true
	c.err = err
	c.mu.Unlock()
	close(c.done)
}

// threadParams reads the threadId most notifications and server requests
// carry.
type threadParams struct {
	ThreadID string `json:"threadId"`
}

func (c *conn) dispatch(m *message) {
	if m.Method == "" {
		c.deliverResponse(m)
		return
	}
	if c.trace != nil {
		c.trace("recv", m.Method)
	}
	var p threadParams
	_ = json.Unmarshal(m.Params, &p)
	c.mu.Lock()
	box := c.threads[p.ThreadID]
	c.mu.Unlock()
	if box != nil && p.ThreadID != "" {
		box.put(m)
		return
	}
	if m.isRequest() {
		// Nobody runs a turn on this thread: refuse, so the app-server
		// does not wait forever.
		_ = c.respondError(m.ID, codeInvalidParams, "no teamster run is attached to this thread")
	}
}

func (c *conn) deliverResponse(m *message) {
	var id int64
	if err := json.Unmarshal(m.ID, &id); err != nil {
		c.log.Warn("codex: a response from the app-server has an id the harness never sent; ignored")
		return
	}
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- m // buffered
	}
}

// subscribe routes the thread's notifications and server requests to a new
// mailbox until unsubscribe.
func (c *conn) subscribe(threadID string) *mailbox {
	b := newMailbox()
	c.mu.Lock()
	c.threads[threadID] = b
	c.mu.Unlock()
	return b
}

func (c *conn) unsubscribe(threadID string, b *mailbox) {
	c.mu.Lock()
	if c.threads[threadID] == b {
		delete(c.threads, threadID)
	}
	c.mu.Unlock()
}

// request is a request the harness sends.
type request struct {
	ID     int64  `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params"`
}

// call sends a request and decodes its result into out (when not nil).
func (c *conn) call(ctx context.Context, method string, params, out any) error {
	res, err := c.callGuarded(ctx, method, params, nil)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			return fmt.Errorf("%s: the app-server's result does not decode: %w", method, err)
		}
	}
	return nil
}

// callGuarded sends a request and waits for its result. guard, when set, is
// called after the request is fully prepared and immediately before it is
// written; when it returns false nothing is written (errGuardRefused). The
// error says what is known: errGuardRefused or errConnClosed (not sent), an
// *rpcError (sent and refused), an *errUnanswered (sent, outcome unknown), or
// a write error (wrapped in *errUnanswered too: part of it may have gone
// out).
func (c *conn) callGuarded(ctx context.Context, method string, params any, guard func() bool) (json.RawMessage, error) {
	if params == nil {
		params = struct{}{}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errConnClosed
	}
	c.next++
	id := c.next
	ch := make(chan *message, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	b, err := json.Marshal(request{ID: id, Method: method, Params: params})
	if err != nil {
		return nil, fmt.Errorf("%s: encode: %w", method, err)
	}
	if guard != nil && !guard() {
		return nil, errGuardRefused
	}
	if err := c.write(method, b); err != nil {
		return nil, &errUnanswered{err}
	}
	select {
	case m := <-ch:
		return result(m)
	case <-c.done:
		// The answer may have come in just before the end.
		select {
		case m := <-ch:
			return result(m)
		default:
		}
		return nil, &errUnanswered{fmt.Errorf("the app-server exited (%v)", c.Err())}
	case <-ctx.Done():
		return nil, &errUnanswered{ctx.Err()}
	}
}

func result(m *message) (json.RawMessage, error) {
	if m.Error != nil {
		return nil, m.Error
	}
	return m.Result, nil
}

// notify sends a notification.
func (c *conn) notify(method string, params any) error {
	msg := struct {
		Method string `json:"method"`
		Params any    `json:"params,omitempty"`
	}{method, params}
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return c.write(method, b)
}

// respond answers a server request.
func (c *conn) respond(id json.RawMessage, res any) error {
	b, err := json.Marshal(struct {
		ID     json.RawMessage `json:"id"`
		Result any             `json:"result"`
	}{id, res})
	if err != nil {
		return err
	}
	return c.write("", b)
}

// respondError refuses a server request.
func (c *conn) respondError(id json.RawMessage, code int, msg string) error {
	b, err := json.Marshal(struct {
		ID    json.RawMessage `json:"id"`
		Error rpcError        `json:"error"`
	}{id, rpcError{Code: code, Message: msg}})
	if err != nil {
		return err
	}
	return c.write("", b)
}

func (c *conn) write(method string, b []byte) error {
	select {
	case <-c.done:
		return errConnClosed
	default:
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(append(b, '\n')); err != nil {
		return err
	}
	if c.trace != nil && method != "" {
		c.trace("send", method)
	}
	return nil
}

// mailbox holds one thread's messages for the run that reads them; the
// reader never blocks on a slow run.
type mailbox struct {
	mu     sync.Mutex
	items  []*message
	signal chan struct{} // capacity 1: "something arrived"
}

func newMailbox() *mailbox { return &mailbox{signal: make(chan struct{}, 1)} }

func (b *mailbox) put(m *message) {
	b.mu.Lock()
	b.items = append(b.items, m)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// take removes and returns everything queued.
func (b *mailbox) take() []*message {
	b.mu.Lock()
	defer b.mu.Unlock()
	items := b.items
	b.items = nil
	return items
}
