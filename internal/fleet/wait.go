package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrTimeout is what Wait returns when its timeout passes before its
// condition holds.
var ErrTimeout = errors.New("timed out")

// pollEvery is how often the fleet's own waits look again.
const pollEvery = 10 * time.Millisecond

// Wait is the readiness wait of every fleet: it checks cond at once, then
// every `every`, until cond holds (nil), cond fails (its error, at once:
// the thing waited for cannot become ready, e.g. its process exited), ctx
// ends (ctx's error) or timeout passes (ErrTimeout).
func Wait(ctx context.Context, timeout, every time.Duration, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return ErrTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// readyzTimeout bounds one /readyz request.
const readyzTimeout = 3 * time.Second

// Readyz asks a daemon's metrics server at addr (host:port) whether the
// daemon is ready: nil when /readyz answers 200 (Router.Ready,
// Worker.Ready).
func Readyz(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, readyzTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %s", resp.Status)
	}
	return nil
}

// WaitWorkers waits until the router (started last) counts at least n live
// workers in the registry.
func (f *Fleet) WaitWorkers(ctx context.Context, n int, timeout time.Duration) error {
	r := f.Router()
	if r == nil {
		return errNoRouter
	}
	err := Wait(ctx, timeout, pollEvery, func(context.Context) (bool, error) { return r.LiveWorkers() >= n, nil })
	if errors.Is(err, ErrTimeout) {
		return fmt.Errorf("the router did not see %d workers in the registry within %s (sees %d)", n, timeout, r.LiveWorkers())
	}
	return err
}

// WaitHarnesses waits until the router (started last) sees, for every
// harness id of want, at least that many live workers advertising it.
func (f *Fleet) WaitHarnesses(ctx context.Context, want map[string]int, timeout time.Duration) error {
	r := f.Router()
	if r == nil {
		return errNoRouter
	}
	var got map[string]int
	err := Wait(ctx, timeout, pollEvery, func(context.Context) (bool, error) {
		got = map[string]int{}
		for _, m := range r.Manifests() {
			got[m.ID]++
		}
		for id, n := range want {
			if got[id] < n {
				return false, nil
			}
		}
		return true, nil
	})
	if errors.Is(err, ErrTimeout) {
		return fmt.Errorf("the router did not see the workers in the registry within %s (sees %v, want %v)", timeout, got, want)
	}
	return err
}
