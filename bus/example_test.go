package bus_test

import (
	"errors"
	"fmt"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// A gateway decodes the terminal result of its attempt and tests its error
// with errors.Is against the error codes of the root package.
func ExampleResult_Err() {
	body := []byte(`{"v":1,"attemptId":"01J00000000000000000000001","status":"timeout",
		"assistantTexts":[],"usage":{"outputTokens":0},
		"error":{"code":"queue_timeout","message":"no worker claimed it in time","sideEffects":"none"}}`)
	var r bus.Result
	if err := bus.Decode(body, &r); err != nil {
		fmt.Println("bad result:", err)
		return
	}
	err := r.Err()
	fmt.Println(r.Status, err)
	fmt.Println("queue timeout:", errors.Is(err, teamster.ErrQueueTimeout))

	ok := bus.Result{Status: teamster.StatusOK}
	fmt.Println("ok result error:", ok.Err())
	// Output:
	// timeout queue_timeout: no worker claimed it in time
	// queue timeout: true
	// ok result error: <nil>
}

// A submit reply says whether the fleet took the attempt; Err is its
// refusal.
func ExampleSubmitReply_Err() {
	body := []byte(`{"v":1,"status":"rejected",
		"error":{"code":"harness_not_registered","message":"no worker runs harness \"codex\""}}`)
	var rep bus.SubmitReply
	if err := bus.Decode(body, &rep); err != nil {
		fmt.Println("bad reply:", err)
		return
	}
	err := rep.Err()
	fmt.Println(rep.Status, errors.Is(err, teamster.ErrHarnessNotRegistered))
	fmt.Println(err)
	// Output:
	// rejected true
	// harness_not_registered: no worker runs harness "codex"
}
