package codex

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/injection"
)

// peer is a stand-in for the app-server at the other end of a conn: it
// reads the harness's requests and answers each with answer (nil: no
// answer). The real app-server's behaviour is covered by the acceptance
// tests; these tests pin down the harness's side of each outcome.
type peer struct {
	c       *conn
	mu      sync.Mutex
	methods []string
	toApp   *io.PipeWriter // harness → peer
	fromApp *io.PipeWriter // peer → harness
}

func newPeer(t *testing.T, answer func(method string) *message) *peer {
	t.Helper()
	hr, hw := io.Pipe() // harness writes, peer reads
	pr, pw := io.Pipe() // peer writes, harness reads
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := &peer{toApp: hw, fromApp: pw}
	p.c = newConn(hw, pr, log, nil)
	go func() {
		sc := bufio.NewScanner(hr)
		for sc.Scan() {
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(sc.Bytes(), &req) != nil {
				continue
			}
			p.mu.Lock()
			p.methods = append(p.methods, req.Method)
			p.mu.Unlock()
			if m := answer(req.Method); m != nil {
				m.ID = req.ID
				b, _ := json.Marshal(m)
				if _, err := pw.Write(append(b, '\n')); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { p.exit() })
	return p
}

// exit ends the connection, as a dying app-server does.
func (p *peer) exit() {
	_ = p.fromApp.Close()
	_ = p.toApp.Close()
	<-p.c.Done()
}

func (p *peer) sent() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.methods...)
}

// settlements records a queued input's admission and settlements.
type settlements struct {
	mu       sync.Mutex
	accepted int
	settled  []injection.Settlement
}

func (s *settlements) opts() injection.QueueOptions {
	return injection.QueueOptions{
		OnQueueAccepted: func(bool) { s.mu.Lock(); s.accepted++; s.mu.Unlock() },
		OnQueueSettled:  func(st injection.Settlement) { s.mu.Lock(); s.settled = append(s.settled, st); s.mu.Unlock() },
	}
}

func (s *settlements) get() (int, []injection.Settlement) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, append([]injection.Settlement(nil), s.settled...)
}

func steerTurn(p *peer) *turn {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &turn{c: p.c, threadID: "th-1", turnID: "tu-1", log: log}
}

func TestSteerSettlesEachItemOnce(t *testing.T) {
	ok := func(string) *message { return &message{Result: json.RawMessage(`{"turnId":"tu-1"}`)} }
	refuse := func(string) *message {
		return &message{Error: &rpcError{Code: -32600, Message: "expected active turn id `tu-1` but found `tu-2`"}}
	}
	silent := func(string) *message { return nil }
	for _, tc := range []struct {
		name     string
		answer   func(string) *message
		assert   injection.AssertFunc
		kind     injection.Kind
		ended    bool
		die      bool // the app-server dies after the steer was written
		wantCode teamster.Code
		wantSent bool
		wantAcc  int
		want     injection.Settlement
	}{
		{name: "answered: committed", answer: ok, assert: yes, kind: injection.KindRun, wantSent: true, wantAcc: 1, want: injection.Committed},
		{name: "assertion false: nothing written, rejected", answer: ok, assert: no, kind: injection.KindSourceBound,
			wantCode: teamster.CodeSourceRevoked, want: injection.Rejected},
		{name: "run assertion false", answer: ok, assert: no, kind: injection.KindRun, wantCode: teamster.CodeNoActiveRun, want: injection.Rejected},
		{name: "missing assertion counts as false", answer: ok, kind: injection.KindRun, wantCode: teamster.CodeNoActiveRun, want: injection.Rejected},
		{name: "turn over: nothing written", answer: ok, assert: yes, kind: injection.KindRun, ended: true, wantCode: teamster.CodeNoActiveRun, want: injection.Rejected},
		{name: "refused by the app-server: rejected", answer: refuse, assert: yes, kind: injection.KindRun, wantSent: true,
			wantCode: teamster.CodeNoActiveRun, want: injection.Rejected},
		{name: "written, never answered: unconfirmed", answer: silent, assert: yes, kind: injection.KindRun, die: true, wantSent: true,
			wantAcc: 1, want: injection.Unconfirmed},
		{name: "unknown authority kind", answer: ok, assert: yes, kind: "other", wantCode: teamster.CodeInvalidRequest, want: injection.Rejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, tc.answer)
			tr := steerTurn(p)
			tr.ended.Store(tc.ended)
			h := tr.newSteerer().V2()
			var s settlements
			if tc.die {
				go func() {
					for len(p.sent()) == 0 {
						time.Sleep(time.Millisecond)
					}
					p.exit()
				}()
			}
			err := h.QueueMessage("steer me", s.opts(), tc.assert, tc.kind)
			if got := teamster.CodeOf(err); (tc.wantCode == "" && err != nil) || (tc.wantCode != "" && got != tc.wantCode) {
				t.Fatalf("error %v, want code %q", err, tc.wantCode)
			}
			if sent := len(p.sent()) > 0; sent != tc.wantSent {
				t.Fatalf("written: %v, want %v", sent, tc.wantSent)
			}
			acc, settled := s.get()
			if acc != tc.wantAcc || len(settled) != 1 || settled[0] != tc.want {
				t.Fatalf("accepted %d times, settled %v; want %d and [%s]", acc, settled, tc.wantAcc, tc.want)
			}
		})
	}
}

// The assertion runs after the request is prepared and immediately before
// it is written: never before the turn's own check, never after the write.
func TestSteerAssertsImmediatelyBeforeTheWrite(t *testing.T) {
	var p *peer
	var sentAtAssert atomic.Int64
	p = newPeer(t, func(string) *message { return &message{Result: json.RawMessage(`{}`)} })
	tr := steerTurn(p)
	h := tr.newSteerer().V2()
	var s settlements
	err := h.QueueMessage("x", s.opts(), func() bool {
		sentAtAssert.Store(int64(len(p.sent())))
		return true
	}, injection.KindRun)
	if err != nil {
		t.Fatal(err)
	}
	if sentAtAssert.Load() != 0 || len(p.sent()) != 1 || p.sent()[0] != methodTurnSteer {
		t.Fatalf("at the assertion %d requests were out; after: %v", sentAtAssert.Load(), p.sent())
	}
}

func TestCallGuardedOutcomes(t *testing.T) {
	p := newPeer(t, func(m string) *message {
		if m == "refused" {
			return &message{Error: &rpcError{Code: -32600, Message: "no"}}
		}
		return &message{Result: json.RawMessage(`{"ok":true}`)}
	})
	ctx := t.Context()
	if _, err := p.c.callGuarded(ctx, "x", nil, func() bool { return false }); !errors.Is(err, errGuardRefused) {
		t.Fatalf("guard false: %v", err)
	}
	var re *rpcError
	if _, err := p.c.callGuarded(ctx, "refused", nil, nil); !errors.As(err, &re) || isUnanswered(err) {
		t.Fatalf("refused: %v", err)
	}
	if res, err := p.c.callGuarded(ctx, "fine", nil, nil); err != nil || string(res) != `{"ok":true}` {
		t.Fatalf("answered: %s %v", res, err)
	}
	if got := p.sent(); len(got) != 2 {
		t.Fatalf("sent %v; the guarded-off request must not be written", got)
	}
	p.exit()
	if _, err := p.c.callGuarded(ctx, "late", nil, nil); !errors.Is(err, errConnClosed) {
		t.Fatalf("after exit: %v", err)
	}
}

func yes() bool { return true }
func no() bool  { return false }
