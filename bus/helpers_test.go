package bus_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// obj is a JSON object under construction for a table case. Values are
// marshaled with encoding/json; use raw for an exact literal.
type obj map[string]any

// with returns a copy of o with the key/value pairs kv set.
func (o obj) with(kv ...any) obj {
	c := maps.Clone(o)
	if c == nil {
		c = obj{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		c[kv[i].(string)] = kv[i+1]
	}
	return c
}

// without returns a copy of o without keys.
func (o obj) without(keys ...string) obj {
	c := maps.Clone(o)
	for _, k := range keys {
		delete(c, k)
	}
	return c
}

// String is o's JSON text.
func (o obj) String() string {
	b, err := json.Marshal(o)
	if err != nil {
		panic("test body does not marshal: " + err.Error())
	}
	return string(b)
}

// raw is an exact JSON literal inside an obj.
func raw(s string) json.RawMessage { return json.RawMessage(s) }

// padTo returns body followed by spaces up to n bytes; JSON allows trailing
// whitespace, so the padded body is as valid as body.
func padTo(body string, n int) []byte {
	return append([]byte(body), bytes.Repeat([]byte{' '}, n-len(body))...)
}

// decoder decodes one envelope type and returns the pointer it decoded into.
type decoder func([]byte) (any, error)

// decodeAs is the decoder of envelope type T through bus.Decode.
func decodeAs[T any, P interface {
	*T
	bus.Envelope
}]() decoder {
	return func(b []byte) (any, error) {
		v := P(new(T))
		if err := bus.Decode(b, v); err != nil {
			return nil, err
		}
		return v, nil
	}
}

// Decoders of every envelope type read through bus.Decode.
var (
	decodeSubmitReply        = decodeAs[bus.SubmitReply]()
	decodeEvent              = decodeAs[bus.Event]()
	decodeResult             = decodeAs[bus.Result]()
	decodeInjectRequest      = decodeAs[bus.InjectRequest]()
	decodeInjectReply        = decodeAs[bus.InjectReply]()
	decodeSourceGrant        = decodeAs[bus.SourceGrant]()
	decodeSourceRevoke       = decodeAs[bus.SourceRevoke]()
	decodeCancelRequest      = decodeAs[bus.CancelRequest]()
	decodeSessionOp          = decodeAs[bus.SessionOp]()
	decodeToolCall           = decodeAs[bus.ToolCall]()
	decodeToolReply          = decodeAs[bus.ToolReply]()
	decodeToolTerminal       = decodeAs[bus.ToolTerminal]()
	decodeToolTerminalReply  = decodeAs[bus.ToolTerminalReply]()
	decodeUserInput          = decodeAs[bus.UserInput]()
	decodeUserInputReply     = decodeAs[bus.UserInputReply]()
	decodeAssertCurrent      = decodeAs[bus.AssertCurrent]()
	decodeAssertCurrentReply = decodeAs[bus.AssertCurrentReply]()
	decodeReplyMedia         = decodeAs[bus.ReplyMedia]()
	decodeRunRead            = decodeAs[bus.RunRead]()
	decodeRunReadReply       = decodeAs[bus.RunReadReply]()
	decodeUsageReport        = decodeAs[bus.UsageReport]()
	decodeWorkerControl      = decodeAs[bus.WorkerControl]()
	decodeWorkerControlReply = decodeAs[bus.WorkerControlReply]()
	decodeWorkerEntry        = decodeAs[bus.WorkerEntry]()
	decodeReply              = decodeAs[bus.Reply]()
)

func decodeSubmit(b []byte) (any, error) {
	a, err := bus.DecodeSubmit(b)
	if err != nil {
		return nil, err
	}
	return a, nil
}

func decodeAttempt(b []byte) (any, error) {
	a, err := bus.DecodeAttempt(b)
	if err != nil {
		return nil, err
	}
	return a, nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// cmpOpts compare decoded envelopes: a json.RawMessage by its JSON text as
// Encode writes it (compacted, HTML-escaped), and a nil slice like an empty one
// (omitempty drops an empty list). A nil pointer (toolsAllow) still differs
// from a pointer to an empty list.
var cmpOpts = cmp.Options{
	// Only for json.RawMessage itself: a []byte field (RunReadReply.Data) is
	// assignable to it, but holds bytes, not JSON.
	cmp.FilterPath(func(p cmp.Path) bool { return p.Last().Type() == rawMessageType },
		cmp.Comparer(func(a, b json.RawMessage) bool { return canonicalJSON(a) == canonicalJSON(b) })),
	cmp.FilterPath(func(p cmp.Path) bool { return p.Last().Type() != rawMessageType }, cmpopts.EquateEmpty()),
}

// canonicalJSON is m as json.Marshal writes a json.RawMessage: compacted and
// HTML-escaped. Invalid JSON is returned as is, so it equals only itself.
func canonicalJSON(m json.RawMessage) string {
	if len(m) == 0 {
		return ""
	}
	var c, e bytes.Buffer
	if err := json.Compact(&c, m); err != nil {
		return string(m)
	}
	json.HTMLEscape(&e, c.Bytes())
	return e.String()
}

// maxErrorMessage bounds what an error may say about a body: enough to name
// the field and show a short prefix of a bad value, never the body itself.
const maxErrorMessage = 1024

// checkDecodeError fails t unless err is a decoding error of the contract: a
// *teamster.Error (not wrapped) with code invalid_request, or
// payload_too_large exactly when the body is over bus.MaxBody, and a short,
// valid UTF-8 message.
func checkDecodeError(t *testing.T, body []byte, err error) {
	t.Helper()
	e, ok := err.(*teamster.Error)
	if !ok {
		t.Fatalf("error %v is a %T, want a *teamster.Error", err, err)
	}
	switch {
	case len(body) > bus.MaxBody && e.Code != teamster.CodePayloadTooLarge:
		t.Fatalf("body of %d bytes: code %s, want payload_too_large", len(body), e.Code)
	case len(body) <= bus.MaxBody && e.Code != teamster.CodeInvalidRequest:
		t.Fatalf("body of %d bytes: code %s, want invalid_request", len(body), e.Code)
	}
	if len(e.Message) > maxErrorMessage {
		t.Fatalf("error message is %d bytes long (want at most %d): %.200s…", len(e.Message), maxErrorMessage, e.Message)
	}
	if !utf8.ValidString(e.Message) {
		t.Fatalf("error message is not valid UTF-8: %q", e.Message)
	}
}

// checkRoundTrip fails t unless v, encoded with bus.Encode and decoded again
// with dec, decodes without error to a value equal to v.
func checkRoundTrip(t *testing.T, dec decoder, v any) {
	t.Helper()
	b, err := bus.Encode(v)
	if err != nil {
		t.Fatalf("Encode(%#v): %v", v, err)
	}
	again, err := dec(b)
	if err != nil {
		t.Fatalf("decoding the re-encoded value %s: %v", b, err)
	}
	if !cmp.Equal(v, again, cmpOpts) {
		t.Fatalf("round trip changed the value (-decoded +re-decoded):\n%s", cmp.Diff(v, again, cmpOpts))
	}
}

// decodeCase is one body of a table test.
type decodeCase struct {
	name string
	body string
	// want is the sentinel of the expected error; nil means the body is valid.
	want error
	// value, when not nil, is what a valid body decodes to.
	value any
}

func valid(name string, body any) decodeCase {
	return decodeCase{name: name, body: bodyText(body)}
}

func validAs(name string, body any, value any) decodeCase {
	return decodeCase{name: name, body: bodyText(body), value: value}
}

func invalidReq(name string, body any) decodeCase {
	return decodeCase{name: name, body: bodyText(body), want: teamster.ErrInvalidRequest}
}

func bodyText(body any) string {
	switch b := body.(type) {
	case string:
		return b
	case obj:
		return b.String()
	}
	panic("test body is neither a string nor an obj")
}

// runDecodeCases decodes every case with dec. An invalid body must fail with
// the case's code; a valid one must decode (to value, when given) and survive
// an Encode/decode round trip.
func runDecodeCases(t *testing.T, dec decoder, cases []decodeCase) {
	t.Helper()
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			got, err := dec([]byte(tc.body))
			if tc.want != nil {
				if err == nil {
					t.Fatalf("decoded %s without error, want %v", abbrev(tc.body), tc.want)
				}
				checkDecodeError(t, []byte(tc.body), err)
				if !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want code %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("decoding %s: %v", abbrev(tc.body), err)
			}
			if tc.value != nil {
				if diff := cmp.Diff(tc.value, got, cmpOpts); diff != "" {
					t.Errorf("decoded value (-want +got):\n%s", diff)
				}
			}
			checkRoundTrip(t, dec, got)
		})
	}
}

// abbrev shortens a body for a failure message.
func abbrev(s string) string {
	if len(s) <= 300 {
		return s
	}
	return s[:300] + "…"
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// idOfLen returns an identifier of n characters that satisfies the identifier rule.
func idOfLen(n int) string { return strings.Repeat("a", n) }
