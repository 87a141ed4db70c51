package client

import (
	"errors"

	"github.com/teamster-fleet/teamster/bus"
)

// The errors the client returns itself (the fleet's errors are
// *teamster.Error values; a refused submit is a *RejectedError that unwraps
// to one).

// ErrClientClosed says the client was closed (Client.Close): it submits
// nothing more, and its handles get no result from it.
var ErrClientClosed = errors.New("the teamster client is closed")

// ErrNoResult says an attempt has no durable result (yet, or any more: results
// are kept 24 hours).
var ErrNoResult = errors.New("no result for this attempt")

// RejectedError is the router's refusal of a submit. Reply is the router's
// answer, with the selection record when selection ran (which harness was
// asked for, the candidates and why none fit). It unwraps to the reply's
// *teamster.Error, so errors.Is(err, teamster.ErrHarnessNotRegistered),
// errors.As into a *teamster.Error and teamster.CodeOf see its code.
type RejectedError struct {
	Reply *bus.SubmitReply
}

func (e *RejectedError) Error() string {
	if e.Reply == nil || e.Reply.Error == nil {
		return "the router rejected the attempt"
	}
	return e.Reply.Error.Error()
}

// Unwrap returns the reply's *teamster.Error.
func (e *RejectedError) Unwrap() error {
	if e.Reply == nil || e.Reply.Error == nil {
		return nil
	}
	return e.Reply.Error
}
