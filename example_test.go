package teamster_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/teamster-fleet/teamster"
)

// A gateway tells the errors of a result apart with errors.Is against the
// sentinels, whatever their message; Code.ResultStatus is the status a
// result with that error has.
func Example() {
	// The error of a result as it arrives on the wire.
	var err *teamster.Error
	if e := json.Unmarshal([]byte(`{"code":"worker_lost","message":"worker w2 stopped renewing","sideEffects":"possible"}`), &err); e != nil {
		panic(e)
	}
	switch {
	case errors.Is(err, teamster.ErrWorkerLost), errors.Is(err, teamster.ErrLeaseLost):
		fmt.Println("the turn may have run in part:", err.SideEffects)
	case errors.Is(err, teamster.ErrHarnessFailed):
		fmt.Println("the harness failed the turn")
	}
	for _, sentinel := range []*teamster.Error{teamster.ErrDeadlineExceeded, teamster.ErrCancelled,
		teamster.ErrDrainTimeout, teamster.ErrHarnessFailed, teamster.ErrWorkerLost} {
		fmt.Printf("%s: %s\n", sentinel.Code, sentinel.Code.ResultStatus())
	}
	fmt.Println(teamster.CodeOf(fmt.Errorf("submit: %w", teamster.Errorf(teamster.CodeSessionBusy, "a turn is running"))))
	// Output:
	// the turn may have run in part: possible
	// deadline_exceeded: timeout
	// cancelled: cancelled
	// drain_timeout: cancelled
	// harness_failed: error
	// worker_lost: error
	// session_busy
}
