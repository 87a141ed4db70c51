package testenv

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakSettle bounds how long CheckLeaks waits for goroutines that are ending
// to end. Stopping is not always synchronous in the libraries underneath: a
// NATS subscription's delivery goroutine ends after Unsubscribe returns, an
// embedded server's after Shutdown. A goroutine still there after this long
// is not ending.
const leakSettle = 10 * time.Second

// CheckLeaks reports the goroutines still running besides the testing
// package's own and the caller's, waiting up to leakSettle for them to end
// (it returns as soon as none is left). Main runs it after the tests; a
// test can run it too (VerifyNoLeaks) once it has stopped everything it
// started.
//
// It ignores nothing of nats.go, nats-server or go-redis: every connection,
// server and client the tests open is closed by them, and its goroutines end.
func CheckLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(leakSettle)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// VerifyNoLeaks fails t when goroutines other than those running when
// baseline was taken (goleak.IgnoreCurrent) are still running after
// leakSettle. A test takes the baseline before it starts anything, stops
// everything, then calls it: the check then covers what the test started
// and nothing that other tests of the binary left to end.
func VerifyNoLeaks(t testing.TB, baseline goleak.Option) {
	t.Helper()
	if err := CheckLeaks(baseline); err != nil {
		t.Error(err)
	}
}
