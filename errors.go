// Package teamster holds what every part of the fleet shares: the error type
// whose codes travel on the wire (docs/PROTOCOL.md, "Error codes").
//
// The daemons live in router/ and worker/, the wire contract in bus/, the Redis
// scripts in leases/; see docs/ARCHITECTURE.md for the map.
package teamster

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Code is one of the error codes of the wire contract.
type Code string

// The codes of docs/PROTOCOL.md. A reply or result carries exactly one.
const (
	CodeInvalidRequest          Code = "invalid_request"
	CodePayloadTooLarge         Code = "payload_too_large"
	CodeHarnessNotRegistered    Code = "harness_not_registered"
	CodeHarnessUnsupportedRoute Code = "harness_unsupported_route"
	CodeDelegationDenied        Code = "delegation_denied"
	CodeOwnerOnly               Code = "owner_only"
	CodeSessionBusy             Code = "session_busy"
	CodeNoActiveRun             Code = "no_active_run"
	CodeInjectionRequiresV2     Code = "injection_requires_v2"
	CodeSourceRevoked           Code = "source_revoked"
	CodeQueueTimeout            Code = "queue_timeout"
	CodeWorkerLost              Code = "worker_lost"
	CodeLeaseLost               Code = "lease_lost"
	CodeDeadlineExceeded        Code = "deadline_exceeded"
	CodeCancelled               Code = "cancelled"
	CodeDrainTimeout            Code = "drain_timeout"
	CodeRuntimeArtifactMismatch Code = "runtime_artifact_mismatch"
	CodeHarnessFailed           Code = "harness_failed"
	CodeInternal                Code = "internal"
)

var knownCodes = map[Code]bool{
	CodeInvalidRequest: true, CodePayloadTooLarge: true, CodeHarnessNotRegistered: true,
	CodeHarnessUnsupportedRoute: true, CodeDelegationDenied: true, CodeOwnerOnly: true,
	CodeSessionBusy: true, CodeNoActiveRun: true, CodeInjectionRequiresV2: true,
	CodeSourceRevoked: true, CodeQueueTimeout: true, CodeWorkerLost: true, CodeLeaseLost: true,
	CodeDeadlineExceeded: true, CodeCancelled: true, CodeDrainTimeout: true,
	CodeRuntimeArtifactMismatch: true, CodeHarnessFailed: true, CodeInternal: true,
}

// Valid reports whether c is one of the codes of the contract.
func (c Code) Valid() bool { return knownCodes[c] }

// Status is the status of a terminal result.
type Status string

// Result statuses (docs/PROTOCOL.md, "Error codes").
const (
	StatusOK        Status = "ok"
	StatusError     Status = "error"
	StatusCancelled Status = "cancelled"
	StatusTimeout   Status = "timeout"
)

// ResultStatus is the status a result carrying this code has: timeout for
// deadline_exceeded and queue_timeout, cancelled for cancelled and
// drain_timeout, error for every other code.
func (c Code) ResultStatus() Status {
	switch c {
	case CodeDeadlineExceeded, CodeQueueTimeout:
		return StatusTimeout
	case CodeCancelled, CodeDrainTimeout:
		return StatusCancelled
	default:
		return StatusError
	}
}

// SideEffects says whether a failed attempt may have changed the world.
type SideEffects string

// Side-effect facts of a failed result.
const (
	SideEffectsNone     SideEffects = "none"
	SideEffectsPossible SideEffects = "possible"
)

// Error is the one error type of teamster. It is what replies and results carry
// in their "error" field, and what the Go API returns. errors.Is matches on the
// code alone, so errors.Is(err, teamster.ErrSessionBusy) holds for any
// session_busy error, including one decoded from a reply.
type Error struct {
	Code        Code        `json:"code"`
	Message     string      `json:"message,omitempty"`
	SideEffects SideEffects `json:"sideEffects,omitempty"`
}

// Sentinels for errors.Is. Never modify them; use Errorf to make a new error.
var (
	ErrInvalidRequest          = &Error{Code: CodeInvalidRequest}
	ErrPayloadTooLarge         = &Error{Code: CodePayloadTooLarge}
	ErrHarnessNotRegistered    = &Error{Code: CodeHarnessNotRegistered}
	ErrHarnessUnsupportedRoute = &Error{Code: CodeHarnessUnsupportedRoute}
	ErrDelegationDenied        = &Error{Code: CodeDelegationDenied}
	ErrOwnerOnly               = &Error{Code: CodeOwnerOnly}
	ErrSessionBusy             = &Error{Code: CodeSessionBusy}
	ErrNoActiveRun             = &Error{Code: CodeNoActiveRun}
	ErrInjectionRequiresV2     = &Error{Code: CodeInjectionRequiresV2}
	ErrSourceRevoked           = &Error{Code: CodeSourceRevoked}
	ErrQueueTimeout            = &Error{Code: CodeQueueTimeout}
	ErrWorkerLost              = &Error{Code: CodeWorkerLost}
	ErrLeaseLost               = &Error{Code: CodeLeaseLost}
	ErrDeadlineExceeded        = &Error{Code: CodeDeadlineExceeded}
	ErrCancelled               = &Error{Code: CodeCancelled}
	ErrDrainTimeout            = &Error{Code: CodeDrainTimeout}
	ErrRuntimeArtifactMismatch = &Error{Code: CodeRuntimeArtifactMismatch}
	ErrHarnessFailed           = &Error{Code: CodeHarnessFailed}
	ErrInternal                = &Error{Code: CodeInternal}
)

// Errorf makes an error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is makes errors.Is match any *Error with the same code. A nil *Error
// matches nothing.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t != nil && t.Code == e.Code
}

// WithSideEffects returns a copy of e that carries the side-effect fact.
func (e *Error) WithSideEffects(s SideEffects) *Error {
	c := *e
	c.SideEffects = s
	return &c
}

// UnmarshalJSON decodes the wire form and refuses an error without a known code,
// so a decoded *Error always carries one of the contract's codes.
func (e *Error) UnmarshalJSON(b []byte) error {
	type wire Error
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if !w.Code.Valid() {
		return fmt.Errorf("error code %.40q is not one of the contract's codes", w.Code)
	}
	if w.SideEffects != "" && w.SideEffects != SideEffectsNone && w.SideEffects != SideEffectsPossible {
		return fmt.Errorf("sideEffects %.40q is not none or possible", w.SideEffects)
	}
	*e = Error(w)
	return nil
}

// AsError returns err as an *Error: itself when it is one (or wraps one), else
// an internal error carrying err's text. It returns nil for nil.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// CodeOf returns the code of err, internal for an error that is not an *Error,
// and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return AsError(err).Code
}
