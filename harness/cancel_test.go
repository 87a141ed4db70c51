package harness_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/harness"
)

func TestCancellationKeepsFirstReason(t *testing.T) {
	leaseLost := teamster.Errorf(teamster.CodeLeaseLost, "lease gone")
	drain := teamster.Errorf(teamster.CodeDrainTimeout, "drain over")
	cancelled := teamster.Errorf(teamster.CodeCancelled, "by the gateway")
	deadline := teamster.Errorf(teamster.CodeDeadlineExceeded, "late")
	cases := []struct {
		name    string
		reasons []error
		want    []bool
		code    teamster.Code
		same    error // the reason kept, when it is one given as is
	}{
		{"lease lost first", []error{leaseLost, cancelled, drain}, []bool{true, false, false}, teamster.CodeLeaseLost, leaseLost},
		{"cancel then drain", []error{cancelled, drain}, []bool{true, false}, teamster.CodeCancelled, cancelled},
		{"drain then deadline", []error{drain, deadline}, []bool{true, false}, teamster.CodeDrainTimeout, drain},
		{"deadline then lease", []error{deadline, leaseLost}, []bool{true, false}, teamster.CodeDeadlineExceeded, deadline},
		{"nil is cancelled", []error{nil, leaseLost}, []bool{true, false}, teamster.CodeCancelled, nil},
		{"context deadline", []error{context.DeadlineExceeded}, []bool{true}, teamster.CodeDeadlineExceeded, nil},
		{"wrapped teamster error", []error{fmt.Errorf("native: %w", leaseLost)}, []bool{true}, teamster.CodeLeaseLost, leaseLost},
		{"plain error", []error{errors.New("native interrupt")}, []bool{true}, teamster.CodeCancelled, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := harness.NewCancellation(context.Background())
			if !c.Admitting() || c.Reason() != nil || c.Context().Err() != nil {
				t.Fatal("a new cancellation is not open")
			}
			var got []bool
			for _, r := range tc.reasons {
				got = append(got, c.Cancel(r))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("Cancel results (-want +got):\n%s", diff)
			}
			wantCode(t, "reason", c.Reason(), tc.code)
			if tc.same != nil && c.Reason() != tc.same {
				t.Fatalf("reason %v, want the one given (%v)", c.Reason(), tc.same)
			}
			waitClosed(t, c.Context().Done(), "context")
			if cause := context.Cause(c.Context()); cause != c.Reason() {
				t.Fatalf("context cause %v, want the reason %v", cause, c.Reason())
			}
			if c.Admitting() {
				t.Fatal("a cancelled run still admits")
			}
		})
	}
}

func TestCancellationParent(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := harness.NewCancellation(parent)
	cancel(teamster.Errorf(teamster.CodeLeaseLost, "lease gone"))
	waitClosed(t, c.Context().Done(), "context")
	wantCode(t, "reason", c.Reason(), teamster.CodeLeaseLost)
	if c.Cancel(teamster.ErrCancelled) {
		t.Fatal("Cancel after the parent's end took over")
	}
	wantCode(t, "reason", c.Reason(), teamster.CodeLeaseLost)
}

func TestCancellationFreeze(t *testing.T) {
	leaseLost := teamster.Errorf(teamster.CodeLeaseLost, "lease gone")
	failed := teamster.Errorf(teamster.CodeHarnessFailed, "native crashed")
	interrupted := teamster.Errorf(teamster.CodeHarnessFailed, "native turn interrupted")
	cases := []struct {
		name    string
		cancel  error // nil: no Cancel before Freeze
		outcome error
		want    error
	}{
		{"completed", nil, nil, nil},
		{"failed", nil, failed, failed},
		{"cancelled: the reason beats the harness's error", leaseLost, interrupted, leaseLost},
		{"cancelled too late: the completed turn stands", leaseLost, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancelCause(context.Background())
			defer cancelParent(nil)
			c := harness.NewCancellation(parent)
			if tc.cancel != nil {
				c.Cancel(tc.cancel)
			}
			reason := c.Reason()
			if got := c.Freeze(tc.outcome); got != tc.want {
				t.Fatalf("Freeze = %v, want %v", got, tc.want)
			}
			if !c.Frozen() || c.Admitting() {
				t.Fatal("a frozen cancellation admits")
			}
			// After the terminal boundary nothing changes.
			if c.Cancel(teamster.Errorf(teamster.CodeDrainTimeout, "drain")) {
				t.Fatal("Cancel after Freeze reported true")
			}
			cancelParent(teamster.Errorf(teamster.CodeWorkerLost, "late"))
			if got := c.Freeze(failed); got != tc.want {
				t.Fatalf("second Freeze = %v, want the first outcome %v", got, tc.want)
			}
			if got := c.Outcome(); got != tc.want {
				t.Fatalf("Outcome = %v, want %v", got, tc.want)
			}
			if c.Reason() != reason {
				t.Fatalf("reason changed after Freeze: %v, was %v", c.Reason(), reason)
			}
			if tc.cancel == nil && c.Context().Err() != nil {
				t.Fatal("the parent's end after Freeze ended the context")
			}
		})
	}
}

func TestConcurrentCancelOneWins(t *testing.T) {
	c := harness.NewCancellation(nil)
	const n = 32
	reasons := make([]*teamster.Error, n)
	won := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		reasons[i] = teamster.Errorf(teamster.CodeCancelled, "reason %d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			won[i] = c.Cancel(reasons[i])
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Freeze(teamster.ErrHarnessFailed)
	}()
	wg.Wait()
	winners := 0
	for i := range n {
		if won[i] {
			winners++
			if c.Reason() != reasons[i] {
				t.Fatalf("reason %v, want the winner's %v", c.Reason(), reasons[i])
			}
		}
	}
	if winners > 1 || (winners == 0 && c.Reason() != nil) {
		t.Fatalf("%d winners with reason %v", winners, c.Reason())
	}
}
