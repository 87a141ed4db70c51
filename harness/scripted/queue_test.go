package scripted_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/injection"
)

// handleOf returns the run's installed handle once the run has said "ready".
func handleOf(t *testing.T, run *harness.Run, ready <-chan struct{}) any {
	t.Helper()
	<-ready
	return run.Injector()
}

func always() bool { return true }

func TestInjectionV2Delivered(t *testing.T) {
	h := &host{}
	ready := signalOn(h, "ready")
	run := newRun(script(t, m{"say": "ready"}, m{"awaitInjection": 3_600_000}, m{"say": "after"}), h)
	done := start(context.Background(), scripted.New(manifest("v2"), scripted.Options{}), run)
	v2, ok := handleOf(t, run, ready).(injection.V2)
	if !ok {
		t.Fatalf("handle %T is not an injection.V2", run.Injector())
	}
	var rec recorder
	if err := v2.QueueMessage("steer left", rec.opts(), always, injection.KindSourceBound); err != nil {
		t.Fatal(err)
	}
	r := <-done // the hour-long await returned early
	if r.err != nil {
		t.Fatal(r.err)
	}
	if diff := cmp.Diff([]string{"ready", "steer left", "after"}, r.out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"accepted", "committed"}, rec.Order()); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
	// The run has ended: later input is refused.
	var late recorder
	err := v2.QueueMessage("late", late.opts(), always, injection.KindRun)
	wantCode(t, err, teamster.CodeNoActiveRun)
	if diff := cmp.Diff([]string{"rejected"}, late.Order()); diff != "" {
		t.Errorf("late callbacks (-want +got):\n%s", diff)
	}
}

// Images that come with injected input are shown after its text: the
// decoded size and a hash of the bytes, so a test can see they arrived
// whole; one without readable data says so.
func TestInjectionImages(t *testing.T) {
	h := &host{}
	ready := signalOn(h, "ready")
	run := newRun(script(t, m{"say": "ready"}, m{"awaitInjection": 3_600_000}), h)
	done := start(context.Background(), scripted.New(manifest("v2"), scripted.Options{}), run)
	v2 := handleOf(t, run, ready).(injection.V2)
	var rec recorder
	opts := rec.opts()
	png := []byte("\x89PNG\r\n\x1a\nnot really a picture")
	sum := sha256.Sum256(png)
	opts.Images = []json.RawMessage{
		json.RawMessage(`{"type":"image","mimeType":"image/png","data":"` + base64.StdEncoding.EncodeToString(png) + `"}`),
		json.RawMessage(`{"type":"image","mimeType":"image/png","data":"%%%"}`),
	}
	if err := v2.QueueMessage("look at this", opts, always, injection.KindRun); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := []string{"ready", "look at this", fmt.Sprintf("[image image/png, %d bytes, sha256 %x]", len(png), sum[:6]), "[image: unreadable]"}
	if diff := cmp.Diff(want, r.out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
}

// TestInjectionSeveralTaken: every item queued before an await is taken by it,
// in order.
func TestInjectionSeveralTaken(t *testing.T) {
	h := &host{}
	var recs [3]recorder
	var run *harness.Run
	h.onEmit = func(e event) {
		if e.Data != `{"text":"ready"}` {
			return
		}
		v2 := run.Injector().(injection.V2)
		for i := range recs {
			if err := v2.QueueMessage(fmt.Sprint("in", i), recs[i].opts(), always, injection.KindRun); err != nil {
				t.Error(err)
			}
		}
	}
	run = newRun(script(t, m{"say": "ready"}, m{"awaitInjection": 0}), h)
	out, err := scripted.New(manifest("v2"), scripted.Options{}).RunAttempt(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ready", "in0", "in1", "in2"}, out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	for i := range recs {
		if diff := cmp.Diff([]string{"accepted", "committed"}, recs[i].Order()); diff != "" {
			t.Errorf("item %d callbacks (-want +got):\n%s", i, diff)
		}
	}
}

func TestInjectionV2AssertFalse(t *testing.T) {
	for _, tc := range []struct {
		kind   injection.Kind
		assert injection.AssertFunc
		want   teamster.Code
	}{
		{injection.KindSourceBound, func() bool { return false }, teamster.CodeSourceRevoked},
		{injection.KindRun, func() bool { return false }, teamster.CodeNoActiveRun},
		{injection.KindSourceBound, nil, teamster.CodeSourceRevoked},
		{injection.Kind("other"), always, teamster.CodeInvalidRequest},
	} {
		t.Run(fmt.Sprintf("%s/nil=%v", tc.kind, tc.assert == nil), func(t *testing.T) {
			h := &host{}
			var rec recorder
			var run *harness.Run
			h.onEmit = func(e event) {
				if e.Data == `{"text":"ready"}` {
					v2 := run.Injector().(injection.V2)
					wantCode(t, v2.QueueMessage("revoked", rec.opts(), tc.assert, tc.kind), tc.want)
				}
			}
			run = newRun(script(t, m{"say": "ready"}, m{"awaitInjection": 0}, m{"say": "after"}), h)
			out, err := scripted.New(manifest("v2"), scripted.Options{}).RunAttempt(context.Background(), run)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"ready", "after"}, out.AssistantTexts); diff != "" {
				t.Errorf("assistant texts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"rejected"}, rec.Order()); diff != "" {
				t.Errorf("callbacks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInjectionRevokedBeforeDispatch: an assertion that falls between queueing
// and the await is checked again, and the item is rejected, not dispatched.
func TestInjectionRevokedBeforeDispatch(t *testing.T) {
	h := &host{}
	var current atomic.Bool
	current.Store(true)
	var calls atomic.Int32
	assert := func() bool { calls.Add(1); return current.Load() }
	var rec recorder
	var run *harness.Run
	h.onEmit = func(e event) {
		if e.Data == `{"text":"ready"}` {
			if err := run.Injector().(injection.V2).QueueMessage("x", rec.opts(), assert, injection.KindSourceBound); err != nil {
				t.Error(err)
			}
			current.Store(false) // the source is revoked
		}
	}
	run = newRun(script(t, m{"say": "ready"}, m{"awaitInjection": 0}), h)
	out, err := scripted.New(manifest("v2"), scripted.Options{}).RunAttempt(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ready"}, out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"accepted", "rejected"}, rec.Order()); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
	if calls.Load() != 2 {
		t.Errorf("assertion called %d times, want 2 (queue, dispatch)", calls.Load())
	}
}

// TestInjectionNotAwaited: input that no await took is cancelled, once, when
// the run returns, on success and on failure alike.
func TestInjectionNotAwaited(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []any
	}{
		{"success", []any{m{"say": "ready"}, m{"say": "done"}}},
		{"fail", []any{m{"say": "ready"}, m{"fail": "broke"}}},
		{"echo", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &host{}
			var recs [2]recorder
			var run *harness.Run
			h.onEmit = func(e event) {
				if e.Data != `{"text":"ready"}` {
					return
				}
				v2 := run.Injector().(injection.V2)
				for i := range recs {
					if err := v2.QueueMessage("x", recs[i].opts(), always, injection.KindRun); err != nil {
						t.Error(err)
					}
				}
			}
			prompt := "ready"
			if tc.steps != nil {
				prompt = script(t, tc.steps...)
			}
			run = newRun(prompt, h)
			out, _ := scripted.New(manifest("v2"), scripted.Options{}).RunAttempt(context.Background(), run)
			if out != nil {
				for _, s := range out.AssistantTexts {
					if s == "x" {
						t.Errorf("unawaited input reached the reply: %q", out.AssistantTexts)
					}
				}
			}
			for i := range recs {
				if diff := cmp.Diff([]string{"accepted", "cancelled"}, recs[i].Order()); diff != "" {
					t.Errorf("item %d callbacks (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestInjectionLevels(t *testing.T) {
	for _, level := range []string{"", "none", "v1", "v2"} {
		t.Run(level, func(t *testing.T) {
			run := newRun("hi", &host{})
			var installed []any
			run.OnInjector(func(h any) { installed = append(installed, h) })
			if _, err := scripted.New(manifest(level), scripted.Options{}).RunAttempt(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			h := run.Injector()
			_, isV1 := h.(injection.V1)
			_, isV2 := h.(injection.V2)
			switch level {
			case "", "none":
				if h != nil || len(installed) != 0 {
					t.Errorf("handle %T installed for injection %q", h, level)
				}
			case "v1":
				if !isV1 || isV2 || len(installed) != 1 {
					t.Errorf("handle %T (V1 %v, V2 %v, installs %d), want one V1 only", h, isV1, isV2, len(installed))
				}
			case "v2":
				if !isV2 || isV1 || len(installed) != 1 {
					t.Errorf("handle %T (V1 %v, V2 %v, installs %d), want one V2 only", h, isV1, isV2, len(installed))
				}
			}
		})
	}
}

func TestInjectionV1(t *testing.T) {
	h := &host{}
	ready := signalOn(h, "ready")
	run := newRun(script(t, m{"say": "ready"}, m{"awaitInjection": 3_600_000}), h)
	done := start(context.Background(), scripted.New(manifest("v1"), scripted.Options{}), run)
	v1 := handleOf(t, run, ready).(injection.V1)
	var rec recorder
	if err := v1.QueueMessage("plain", rec.opts()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if diff := cmp.Diff([]string{"ready", "plain"}, r.out.AssistantTexts); diff != "" {
		t.Errorf("assistant texts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"accepted", "committed"}, rec.Order()); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
	// Without callbacks, nothing breaks.
	wantCode(t, v1.QueueMessage("late", injection.QueueOptions{}), teamster.CodeNoActiveRun)
}

// TestInjectionConcurrent queues from many goroutines while the run takes
// input in several awaits and then ends: every accepted item is settled
// exactly once, after its admission, and exactly the committed items reach
// the reply.
func TestInjectionConcurrent(t *testing.T) {
	const senders, each = 8, 50
	h := &host{}
	ready := signalOn(h, "ready")
	steps := []any{m{"say": "ready"}}
	for range 20 {
		steps = append(steps, m{"awaitInjection": 1})
	}
	run := newRun(script(t, steps...), h)
	done := start(context.Background(), scripted.New(manifest("v2"), scripted.Options{}), run)
	v2 := handleOf(t, run, ready).(injection.V2)

	recs := make([]recorder, senders*each)
	errs := make([]error, senders*each)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				k := s*each + i
				errs[k] = v2.QueueMessage(fmt.Sprint("m", k), recs[k].opts(), always, injection.KindRun)
			}
		})
	}
	r := <-done
	wg.Wait()
	if r.err != nil {
		t.Fatal(r.err)
	}
	texts := map[string]bool{}
	for _, s := range r.out.AssistantTexts[1:] {
		texts[s] = true
	}
	committed := 0
	for k := range recs {
		order := recs[k].Order()
		switch {
		case errs[k] != nil:
			wantCode(t, errs[k], teamster.CodeNoActiveRun)
			if diff := cmp.Diff([]string{"rejected"}, order); diff != "" {
				t.Errorf("refused item %d callbacks (-want +got):\n%s", k, diff)
			}
		case len(order) != 2 || order[0] != "accepted" || (order[1] != "committed" && order[1] != "cancelled"):
			t.Errorf("item %d callbacks %v, want accepted then one settlement", k, order)
		case order[1] == "committed":
			committed++
			if !texts[fmt.Sprint("m", k)] {
				t.Errorf("committed item %d is not in the reply", k)
			}
		default:
			if texts[fmt.Sprint("m", k)] {
				t.Errorf("cancelled item %d is in the reply", k)
			}
		}
	}
	if committed != len(texts) {
		t.Errorf("%d items committed, %d reached the reply", committed, len(texts))
	}
}
