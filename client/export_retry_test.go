package client

import "time"

// SetSubmitTry makes every submit from now on wait d for one reply before
// it sends the submit again; it returns a function that puts the wait back.
func SetSubmitTry(d time.Duration) (restore func()) {
	old := submitTry
	submitTry = d
	return func() { submitTry = old }
}
