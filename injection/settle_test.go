package injection

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// callbacks records one input's callbacks in order.
type callbacks struct {
	mu      sync.Mutex
	events  []string
	settled chan struct{} // closed at the first settlement
}

func (l *callbacks) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *callbacks) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func (l *callbacks) settledCh() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.settled == nil {
		l.settled = make(chan struct{})
	}
	return l.settled
}

func (l *callbacks) opts() QueueOptions {
	return QueueOptions{
		OnQueueAccepted: func(ok bool) { l.add(fmt.Sprintf("accepted:%v", ok)) },
		OnQueueSettled: func(s Settlement) {
			l.settledCh()
			l.mu.Lock()
			defer l.mu.Unlock()
			l.events = append(l.events, string(s))
			select {
			case <-l.settled:
			default:
				close(l.settled)
			}
		},
	}
}

func TestSettlerSettlesOnce(t *testing.T) {
	var l callbacks
	s := NewSettler(l.opts())
	s.Accept()
	s.Accept()
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := []Settlement{Committed, Cancelled, Rejected, Unconfirmed}[i%4]
			if s.Settle(st) {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := won.Load(); n != 1 {
		t.Fatalf("%d Settle calls chose the settlement, want 1", n)
	}
	got := l.get()
	if len(got) != 2 || got[0] != "accepted:true" {
		t.Fatalf("events %q, want accepted:true and one settlement", got)
	}
}

func TestSettlerHoldsSettlementUntilAccepted(t *testing.T) {
	var l callbacks
	s := NewSettler(l.opts())
	if !s.Settle(Cancelled) {
		t.Fatal("first Settle did not choose the settlement")
	}
	if s.Settle(Committed) {
		t.Fatal("second Settle chose the settlement")
	}
	if got := l.get(); len(got) != 0 {
		t.Fatalf("events %q before Accept, want none", got)
	}
	s.Accept()
	if diff := cmp.Diff([]string{"accepted:true", "cancelled"}, l.get()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestSettlerSettleDuringAccept(t *testing.T) {
	var l callbacks
	entered, release := make(chan struct{}), make(chan struct{})
	opts := l.opts()
	opts.OnQueueAccepted = func(ok bool) {
		close(entered)
		<-release
		l.add(fmt.Sprintf("accepted:%v", ok))
	}
	s := NewSettler(opts)
	accepted := make(chan struct{})
	go func() { s.Accept(); close(accepted) }()
	<-entered
	if !s.Settle(Committed) { // must not block on the running OnQueueAccepted
		t.Fatal("Settle did not choose the settlement")
	}
	if got := l.get(); len(got) != 0 {
		t.Fatalf("events %q while OnQueueAccepted runs, want none", got)
	}
	close(release)
	<-accepted
	if diff := cmp.Diff([]string{"accepted:true", "committed"}, l.get()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestSettlerSettleFromOnQueueAccepted(t *testing.T) {
	var l callbacks
	var s *Settler
	opts := l.opts()
	opts.OnQueueAccepted = func(ok bool) {
		s.Settle(Rejected) // re-entrant: must not deadlock
		l.add(fmt.Sprintf("accepted:%v", ok))
	}
	s = NewSettler(opts)
	s.Accept()
	if diff := cmp.Diff([]string{"accepted:true", "rejected"}, l.get()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestRefuse(t *testing.T) {
	var l callbacks
	Refuse(l.opts())
	Refuse(QueueOptions{}) // no callbacks: nothing to call
	if diff := cmp.Diff([]string{"rejected"}, l.get()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestSettlementEventState(t *testing.T) {
	got := map[Settlement]string{}
	for _, s := range []Settlement{Committed, Cancelled, Rejected, Unconfirmed} {
		got[s] = s.EventState()
	}
	want := map[Settlement]string{Committed: "committed", Cancelled: "cancelled", Rejected: "rejected", Unconfirmed: "accepted"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("event states (-want +got):\n%s", diff)
	}
}
