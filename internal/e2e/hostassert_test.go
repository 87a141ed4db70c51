package e2e

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// asserter is a gateway host that makes its own assertions of source-bound
// input (client.HostAsserter): each holds until the test revokes it, and
// stays revoked. It counts how often the worker asked about each.
type asserter struct {
	*client.Tools
	delay time.Duration // how long each answer takes

	mu      sync.Mutex
	revoked map[string]bool
	asked   map[string]int
}

func newAsserter() *asserter {
	return &asserter{Tools: client.NewTools(), revoked: map[string]bool{}, asked: map[string]int{}}
}

func (a *asserter) AssertCurrent(ctx context.Context, _ string, assertion string) (bool, error) {
	a.mu.Lock()
	a.asked[assertion]++
	current := !a.revoked[assertion]
	a.mu.Unlock()
	select {
	case <-time.After(a.delay):
	case <-ctx.Done():
	}
	return current, nil
}

func (a *asserter) revoke(assertion string) {
	a.mu.Lock()
	a.revoked[assertion] = true
	a.mu.Unlock()
}

func (a *asserter) askedAbout(assertion string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asked[assertion]
}

// dispatchLater queues injected input at once but dispatches it only after
// the sleep.
var dispatchLater = fleettest.Script(`{"say":"listening"}`, `{"sleep":1500}`, `{"awaitInjection":100}`)

// Source-bound input under the gateway's own assertion (hostAssertion): the
// worker asks the gateway right before the harness dispatches the item. One
// still current reaches the turn; one the gateway revoked after the inject
// was accepted is dropped with source_revoked, and neither that nor the
// assertion touches the run input queued beside it.
func TestHostAssertionDecidesAtDispatch(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	host := newAsserter()
	srv, err := f.Client.ServeHost("gw-assert", host)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	a := fleettest.Attempt("assert:alice", dispatchLater)
	a.HostID = "gw-assert"
	h := submit(t, f, a)
	waitEvent(t, h, bus.EventPartial)

	inject := func(text, assertion string) *bus.InjectReply {
		t.Helper()
		req := bus.InjectRequest{AttemptID: h.AttemptID(), Text: text, AuthorityKind: bus.AuthorityRun}
		if assertion != "" {
			req.AuthorityKind, req.HostAssertion = bus.AuthoritySourceBound, assertion
		}
		rep, err := f.Client.Inject(t.Context(), req)
		if err != nil || rep.Status != bus.StatusAccepted {
			t.Fatalf("inject %q: %+v %v", text, rep, err)
		}
		return rep
	}
	kept := inject("operator: turn left", "as-kept")
	gone := inject("operator: turn right", "as-gone")
	plain := inject("run: keep going", "")
	host.revoke("as-gone")

	evs := injectionEvents(t, h)
	r := result(t, h)
	if r.Status != teamster.StatusOK {
		t.Fatalf("result %+v", r)
	}
	for _, want := range []string{"operator: turn left", "run: keep going"} {
		if !slices.Contains(r.AssistantTexts, want) {
			t.Errorf("result texts %q lack %q", r.AssistantTexts, want)
		}
	}
	if slices.Contains(r.AssistantTexts, "operator: turn right") {
		t.Errorf("the harness dispatched input whose assertion the gateway revoked: %q", r.AssistantTexts)
	}
	for id, want := range map[string][]string{
		kept.InjectionID:  {"accepted", "committed"},
		gone.InjectionID:  {"accepted", "rejected:source_revoked"},
		plain.InjectionID: {"accepted", "committed"},
	} {
		if got := states(evs, id); !slices.Equal(got, want) {
			t.Errorf("item %s: events %v, want %v", id, got, want)
		}
	}
	// Asked at admission and again at dispatch, after the revoke.
	if n := host.askedAbout("as-gone"); n < 2 {
		t.Errorf("the worker asked about the revoked assertion %d times, want at admission and at dispatch", n)
	}
	if n := host.askedAbout("as-kept"); n < 2 {
		t.Errorf("the worker asked about the kept assertion %d times, want at admission and at dispatch", n)
	}
}

// The gateway's assertion fails closed: a host that answers too late, or
// one that makes no assertions, drops the item; an attempt with no host
// cannot take such input at all.
func TestHostAssertionFailsClosed(t *testing.T) {
	f := fleettest.Start(t, fleettest.Options{Workers: 1})
	slow := newAsserter()
	slow.delay = 3 * time.Second // beyond the worker's 2 s
	srvSlow, err := f.Client.ServeHost("gw-slow", slow)
	if err != nil {
		t.Fatal(err)
	}
	defer srvSlow.Stop()
	srvPlain, err := f.Client.ServeHost("gw-plain", client.NewTools())
	if err != nil {
		t.Fatal(err)
	}
	defer srvPlain.Stop()

	for _, hostID := range []string{"gw-slow", "gw-plain"} {
		a := fleettest.Attempt("assert:"+hostID, awaitScript)
		a.HostID = hostID
		h := submit(t, f, a)
		waitEvent(t, h, bus.EventPartial)
		rep, err := f.Client.Inject(t.Context(), bus.InjectRequest{AttemptID: h.AttemptID(), Text: "bound words",
			AuthorityKind: bus.AuthoritySourceBound, HostAssertion: "as-1"})
		if err == nil && rep.Status == bus.StatusAccepted {
			t.Fatalf("%s: the item was accepted: %+v", hostID, rep)
		}
		if !errors.Is(err, teamster.ErrSourceRevoked) {
			t.Fatalf("%s: inject: %v, want source_revoked", hostID, err)
		}
		// The run goes on and takes other input.
		if _, err := f.Client.Inject(t.Context(), bus.InjectRequest{AttemptID: h.AttemptID(), Text: "plain words", AuthorityKind: bus.AuthorityRun}); err != nil {
			t.Fatalf("%s: run input after the refusal: %v", hostID, err)
		}
		r := result(t, h)
		if slices.Contains(r.AssistantTexts, "bound words") || !slices.Contains(r.AssistantTexts, "plain words") {
			t.Fatalf("%s: result texts %q", hostID, r.AssistantTexts)
		}
	}
	if n := slow.askedAbout("as-1"); n == 0 {
		t.Fatal("the slow host was never asked")
	}

	// No hostId: nobody could answer the assertion.
	h := submit(t, f, fleettest.Attempt("assert:nohost", awaitScript))
	waitEvent(t, h, bus.EventPartial)
	_, err = f.Client.Inject(t.Context(), bus.InjectRequest{AttemptID: h.AttemptID(), Text: "bound", AuthorityKind: bus.AuthoritySourceBound, HostAssertion: "as-1"})
	if !errors.Is(err, teamster.ErrInvalidRequest) {
		t.Fatalf("host assertion on an attempt without hostId: %v, want invalid_request", err)
	}
	if err := f.Client.Cancel(t.Context(), h.AttemptID(), "done"); err != nil {
		t.Fatal(err)
	}
	_ = result(t, h)
}
