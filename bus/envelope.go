package bus

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	json "github.com/go-json-experiment/json/v1"

	"github.com/teamster-fleet/teamster"
)

// Version is the envelope version every body carries as "v".
const Version = 1

// MaxBody is the largest body a reader accepts (1 MiB). Servers run with a
// larger max_payload so that the router, not the bus, refuses bigger bodies
// with payload_too_large.
const MaxBody = 1 << 20

// Limits on fields, so that no single string can take a record or a log line
// hostage.
const (
	maxKeyLen  = 1024 // sessionKey, storePath
	maxNameLen = 256  // sessionId, agentId, provider, modelId, runId, tool names, ...
	maxSubject = 512  // replyTo
)

// Reply statuses.
const (
	StatusOK       = "ok"
	StatusAccepted = "accepted"
	StatusRejected = "rejected"
	StatusFallback = "fallback"
)

// Envelope is implemented by every v1 body: it checks its own fields after
// decoding and returns an *teamster.Error with code invalid_request.
type Envelope interface {
	Validate() error
}

// Decode reads one v1 envelope from b into dst and validates it. Every failure is
// a *teamster.Error: payload_too_large for bodies over MaxBody, invalid_request
// for anything else. Unknown fields are ignored. It never panics and never
// echoes the body (which may carry user text) in its error.
func Decode(b []byte, dst Envelope) error {
	if len(b) > MaxBody {
		return teamster.Errorf(teamster.CodePayloadTooLarge, "body of %d bytes is over the %d byte limit", len(b), MaxBody)
	}
	if err := jsonv2.Unmarshal(b, dst, strict); err != nil {
		return invalid("malformed body: %s", describeJSONError(err))
	}
	return dst.Validate()
}

// strict is how bodies are read: encoding/json's semantics (member names
// match a field whatever their case), but a body with invalid UTF-8
// anywhere (which encoding/json would silently replace, making two
// different session keys one) or with an object that names a member twice,
// in any case (which readers in other languages may resolve differently
// from Go), is refused.
var strict = jsonv2.JoinOptions(json.DefaultOptionsV1(),
	jsontext.AllowInvalidUTF8(false), jsontext.AllowDuplicateNames(false))

// Encode marshals an envelope. Envelopes hold only marshalable types, so an
// error here is a programming error and is returned as internal.
func Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, teamster.Errorf(teamster.CodeInternal, "encode %T: %v", v, err)
	}
	return b, nil
}

// describeJSONError turns a decoding error into a message that names the field
// and the problem, but not the value.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "body"
		}
		// te.Value is "number <literal>" for numbers: bound it, a literal can
		// be as long as the body.
		return fmt.Sprintf("field %s: %s is not %s", truncate(field, 80), truncate(te.Value, 40), jsonKind(te.Type.Kind().String()))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		var why string
		switch {
		case strings.Contains(se.Error(), "duplicate"):
			why = ": an object names a member twice"
		case strings.Contains(se.Error(), "UTF-8"):
			why = ": invalid UTF-8"
		}
		return fmt.Sprintf("invalid JSON at byte %d%s", se.Offset, why)
	}
	var ee *teamster.Error
	if errors.As(err, &ee) {
		return ee.Message
	}
	return truncate(err.Error(), 200)
}

func jsonKind(k string) string {
	switch k {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return "of the expected type"
}

func invalid(format string, args ...any) *teamster.Error {
	return teamster.Errorf(teamster.CodeInvalidRequest, format, args...)
}

func checkVersion(v int) error {
	if v == 0 {
		return invalid("field v is required")
	}
	if v != Version {
		return invalid("field v: version %d is not supported (want %d)", v, Version)
	}
	return nil
}

// requireString checks a required string field: present, valid UTF-8, at most
// max bytes, no control characters.
func requireString(field, s string, max int) error {
	if s == "" {
		return invalid("field %s is required", field)
	}
	return optionalString(field, s, max)
}

// optionalString checks an optional string field the same way when present.
func optionalString(field, s string, max int) error {
	if len(s) > max {
		return invalid("field %s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(s) {
		return invalid("field %s is not valid UTF-8", field)
	}
	if strings.IndexFunc(s, isControl) >= 0 {
		return invalid("field %s contains control characters", field)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func optionalID(field, s string) error {
	if s == "" {
		return nil
	}
	return CheckID(field, s)
}

func checkRange(field string, n, lo, hi int64) error {
	if n < lo || n > hi {
		return invalid("field %s is %d, outside %d..%d", field, n, lo, hi)
	}
	return nil
}

// ValidReplySubject reports whether s may be used as a reply subject: non-empty
// tokens of printable ASCII without wildcards or whitespace.
func ValidReplySubject(s string) bool {
	if s == "" || len(s) > maxSubject {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if c <= ' ' || c >= 0x7f {
				return false
			}
		}
	}
	return true
}

// Reply is the generic answer {v, status, error?} of requests that return no
// other fields (source grant and revoke, session ops, cancel, usage).
type Reply struct {
	V      int             `json:"v"`
	Status string          `json:"status"`
	Error  *teamster.Error `json:"error,omitempty"`
	// NoRecord is set on the ok answer to a session reset or delete that
	// found no record: there was nothing to do (the ops are idempotent).
	NoRecord bool `json:"noRecord,omitempty"`
}

// Validate checks a generic reply.
func (r *Reply) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	return checkReplyStatus(r.Status, r.Error, StatusOK, StatusAccepted, StatusRejected)
}

// Err returns the reply's error, nil when it is not rejected.
func (r *Reply) Err() error {
	if r.Error != nil {
		return r.Error
	}
	return nil
}

// OK returns an ok reply.
func OK() *Reply { return &Reply{V: Version, Status: StatusOK} }

// Rejected returns a rejected reply carrying err as a *teamster.Error.
func Rejected(err error) *Reply {
	return &Reply{V: Version, Status: StatusRejected, Error: teamster.AsError(err)}
}

// checkReplyStatus checks that status is one of allowed and that an error is
// present exactly when the status is rejected.
func checkReplyStatus(status string, e *teamster.Error, allowed ...string) error {
	ok := false
	for _, a := range allowed {
		if status == a {
			ok = true
		}
	}
	if !ok {
		return invalid("field status %q is not one of %s", truncate(status, 40), strings.Join(allowed, ", "))
	}
	if status == StatusRejected && e == nil {
		return invalid("a rejected reply carries an error")
	}
	if status != StatusRejected && e != nil {
		return invalid("only a rejected reply carries an error")
	}
	return nil
}
