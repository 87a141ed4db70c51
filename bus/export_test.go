package bus

import "time"

// IsPerSubjectLimit is isPerSubjectLimit, for the tests of bus_test.
var IsPerSubjectLimit = isPerSubjectLimit

// SetTryTimeout sets RetryTransient's per-try timeout until the test ends.
func SetTryTimeout(t interface{ Cleanup(func()) }, d time.Duration) {
	old := tryTimeout
	tryTimeout = d
	t.Cleanup(func() { tryTimeout = old })
}
