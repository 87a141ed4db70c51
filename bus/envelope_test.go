package bus_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// Minimal valid bodies of every envelope type: the base every table case edits.
var (
	minAttempt      = obj{"v": 1, "sessionKey": "agent:main:main", "sessionId": "s-1", "agentId": "main", "provider": "openai", "modelId": "gpt-5"}
	minSubmitReply  = obj{"v": 1, "status": "accepted", "attemptId": "a1", "harnessId": "codex"}
	minEvent        = obj{"v": 1, "attemptId": "a1", "seq": 1, "type": "claimed", "data": obj{"workerId": "w1", "harnessId": "codex", "fence": "e1:1"}}
	minResult       = obj{"v": 1, "attemptId": "a1", "status": "ok", "assistantTexts": []string{"hi"}, "usage": obj{"outputTokens": 3}}
	minInject       = obj{"v": 1, "sessionKey": "agent:main:main", "text": "also check the tests", "authorityKind": "run"}
	minInjectReply  = obj{"v": 1, "status": "accepted", "injectionId": "i1", "attemptId": "a1"}
	minSourceGrant  = obj{"v": 1, "id": "src-1", "generation": 1}
	minSourceRevoke = obj{"v": 1, "id": "src-1"}
	minCancel       = obj{"v": 1}
	minSessionOp    = obj{"v": 1, "sessionKey": "agent:main:main"}
	minToolCall     = obj{"v": 1, "callId": "c1", "name": "search", "args": obj{"q": "nats"}}
	minToolReply    = obj{"v": 1, "status": "ok", "result": obj{"hits": 1}}
	minToolTerminal = obj{"v": 1, "callId": "c1", "name": "search", "args": obj{"q": "nats"}, "executionStarted": true, "outcome": "success"}
	minToolTermRep  = obj{"v": 1, "status": "ok"}
	minUserInput    = obj{"v": 1, "question": "Which branch?"}
	minUserInputRep = obj{"v": 1, "status": "ok", "answer": "main"}
	minAssert       = obj{"v": 1, "assertion": "as-1"}
	minAssertRep    = obj{"v": 1, "status": "ok", "current": true}
	minReplyMedia   = obj{"v": 1, "assistantTexts": []string{"MEDIA:out/a.png"}, "token": "t1"}
	minRead         = obj{"v": 1, "token": "t1", "path": "out/a.png", "length": 1024}
	minReadRep      = obj{"v": 1, "status": "ok", "data": "aGk=", "size": 2, "eof": true}
	minUsageReport  = obj{"v": 1, "responseId": "resp-1", "outputTokens": 12}
	minWorkerCtl    = obj{"v": 1, "op": "status"}
	minWorkerCtlRep = obj{"v": 1, "status": "ok", "state": "active", "running": 1, "attempts": []string{"a1"}}
	minWorkerEntry  = obj{"v": 1, "workerId": "w1", "state": "active", "harnesses": []obj{{"id": "codex", "pluginId": "codex", "injection": "v2"}}, "slots": 4, "inFlight": 0, "heartbeatMs": 1700000000000, "startedMs": 1700000000000}
	minReply        = obj{"v": 1, "status": "ok"}
)

// envelopeKind is one decoder of the contract with a minimal valid body.
type envelopeKind struct {
	name   string
	decode decoder
	min    obj
}

// envelopeKinds lists every envelope type and how it is decoded.
func envelopeKinds() []envelopeKind {
	return []envelopeKind{
		{"Submit", decodeSubmit, minAttempt},
		{"Attempt", decodeAttempt, minAttempt},
		{"SubmitReply", decodeSubmitReply, minSubmitReply},
		{"Event", decodeEvent, minEvent},
		{"Result", decodeResult, minResult},
		{"InjectRequest", decodeInjectRequest, minInject},
		{"InjectReply", decodeInjectReply, minInjectReply},
		{"SourceGrant", decodeSourceGrant, minSourceGrant},
		{"SourceRevoke", decodeSourceRevoke, minSourceRevoke},
		{"CancelRequest", decodeCancelRequest, minCancel},
		{"SessionOp", decodeSessionOp, minSessionOp},
		{"ToolCall", decodeToolCall, minToolCall},
		{"ToolReply", decodeToolReply, minToolReply},
		{"ToolTerminal", decodeToolTerminal, minToolTerminal},
		{"ToolTerminalReply", decodeToolTerminalReply, minToolTermRep},
		{"UserInput", decodeUserInput, minUserInput},
		{"UserInputReply", decodeUserInputReply, minUserInputRep},
		{"AssertCurrent", decodeAssertCurrent, minAssert},
		{"AssertCurrentReply", decodeAssertCurrentReply, minAssertRep},
		{"ReplyMedia", decodeReplyMedia, minReplyMedia},
		{"RunRead", decodeRunRead, minRead},
		{"RunReadReply", decodeRunReadReply, minReadRep},
		{"UsageReport", decodeUsageReport, minUsageReport},
		{"WorkerControl", decodeWorkerControl, minWorkerCtl},
		{"WorkerControlReply", decodeWorkerControlReply, minWorkerCtlRep},
		{"WorkerEntry", decodeWorkerEntry, minWorkerEntry},
		{"Reply", decodeReply, minReply},
	}
}

// commonCases are the cases every envelope type answers alike: framing,
// version and size, built around its minimal body.
func commonCases(min obj) []decodeCase {
	body := min.String()
	inner := strings.TrimSuffix(strings.TrimPrefix(body, "{"), "}")
	return []decodeCase{
		valid("minimal body", min),
		valid("whitespace around the object", " \n\t"+body+"\r\n "),
		valid("unknown fields are ignored", min.with("zzFuture", obj{"nested": []any{1, "x", nil}}, "zzFlag", true)),
		valid("body exactly MaxBody bytes", string(padTo(body, bus.MaxBody))),

		invalidReq("empty body", ""),
		invalidReq("whitespace only", "   "),
		invalidReq("unterminated object", "{"+inner),
		invalidReq("trailing comma", "{"+inner+",}"),
		invalidReq("extra closing brace", body+"}"),
		invalidReq("second value after the object", body+" {}"),
		invalidReq("single-quoted keys", "{'v':1}"),
		invalidReq("leading zero in a number", strings.Replace(body, `"v":1`, `"v":01`, 1)),
		invalidReq("byte order mark", "\xef\xbb\xbf"+body),
		invalidReq("truncated literal", "nul"),

		invalidReq("array", "[]"),
		invalidReq("array holding the object", "["+body+"]"),
		invalidReq("string", `"`+strings.ReplaceAll(body, `"`, `\"`)+`"`),
		invalidReq("null", "null"),
		invalidReq("number", "1"),
		invalidReq("boolean", "true"),

		invalidReq("v missing", min.without("v")),
		invalidReq("v null", min.with("v", nil)),
		invalidReq("v 0", min.with("v", 0)),
		invalidReq("v 2", min.with("v", 2)),
		invalidReq("v -1", min.with("v", -1)),
		invalidReq("v as a string", min.with("v", "1")),
		invalidReq("v 1.5", min.with("v", 1.5)),

		{name: "body of MaxBody+1 bytes", body: string(padTo(body, bus.MaxBody+1)), want: teamster.ErrPayloadTooLarge},
		{name: "garbage of MaxBody+1 bytes is too large before it is malformed", body: strings.Repeat("x", bus.MaxBody+1), want: teamster.ErrPayloadTooLarge},
	}
}

func TestDecodeCommonCases(t *testing.T) {
	for _, k := range envelopeKinds() {
		t.Run(k.name, func(t *testing.T) {
			runDecodeCases(t, k.decode, commonCases(k.min))
		})
	}
}

func TestDecodeIgnoresUnknownFields(t *testing.T) {
	for _, k := range envelopeKinds() {
		t.Run(k.name, func(t *testing.T) {
			want, err := k.decode([]byte(k.min.String()))
			if err != nil {
				t.Fatalf("minimal body: %v", err)
			}
			got, err := k.decode([]byte(k.min.with("zzFuture", obj{"a": []int{1}}, "zzOther", "x").String()))
			if err != nil {
				t.Fatalf("minimal body with unknown fields: %v", err)
			}
			if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
				t.Errorf("unknown fields changed the decoded value (-without +with):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrorDoesNotEchoBody(t *testing.T) {
	secret := strings.Repeat("s3cr3t", 1000)
	for _, k := range envelopeKinds() {
		t.Run(k.name, func(t *testing.T) {
			bodies := map[string]string{
				"long number":      `{"v":` + strings.Repeat("9", 10_000) + `}`,
				"long bad v":       `{"v":"` + secret + `"}`,
				"syntax error":     `{"v":1,"x":"` + secret + `",}`,
				"long error code":  k.min.without("v").with("status", "rejected", "error", obj{"code": secret}).String(),
				"long unknown key": `{"` + secret + `":1,` + strings.TrimPrefix(k.min.without("v").String(), "{"),
			}
			for name, body := range bodies {
				_, err := k.decode([]byte(body))
				if err == nil {
					t.Fatalf("%s: decoded without error", name)
				}
				checkDecodeError(t, []byte(body), err)
				if strings.Contains(err.Error(), strings.Repeat("s3cr3t", 20)) {
					t.Errorf("%s: error echoes the body: %.300s", name, err)
				}
			}
		})
	}
}

func TestDecodeSubmitSizeLimit(t *testing.T) {
	// A valid attempt whose prompt makes it exactly MaxBody bytes is accepted;
	// one byte more of prompt is payload_too_large, not invalid_request.
	base := minAttempt.with("prompt", "").String()
	prompt := strings.Repeat("p", bus.MaxBody-len(base))
	atLimit := minAttempt.with("prompt", prompt).String()
	if len(atLimit) != bus.MaxBody {
		t.Fatalf("test body is %d bytes, want %d", len(atLimit), bus.MaxBody)
	}
	a, err := bus.DecodeSubmit([]byte(atLimit))
	if err != nil {
		t.Fatalf("body of exactly MaxBody bytes: %v", err)
	}
	if len(a.Prompt) != len(prompt) {
		t.Errorf("prompt is %d bytes, want %d", len(a.Prompt), len(prompt))
	}
	over := minAttempt.with("prompt", prompt+"p").String()
	_, err = bus.DecodeSubmit([]byte(over))
	if !errors.Is(err, teamster.ErrPayloadTooLarge) {
		t.Fatalf("body of MaxBody+1 bytes: got %v, want payload_too_large", err)
	}
	if errors.Is(err, teamster.ErrInvalidRequest) {
		t.Errorf("payload_too_large error also matches invalid_request")
	}
}

func TestEncode(t *testing.T) {
	t.Run("writes an envelope as JSON", func(t *testing.T) {
		b, err := bus.Encode(bus.OK())
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"v":1,"status":"ok"}`; string(b) != want {
			t.Errorf("Encode(OK()) = %s, want %s", b, want)
		}
	})
	t.Run("an unmarshalable value is internal", func(t *testing.T) {
		_, err := bus.Encode(map[string]any{"f": func() {}})
		if !errors.Is(err, teamster.ErrInternal) {
			t.Fatalf("got %v, want internal", err)
		}
	})
	t.Run("invalid raw JSON is internal", func(t *testing.T) {
		_, err := bus.Encode(&bus.Event{V: 1, AttemptID: "a1", Seq: 1, Type: bus.EventAgent, Data: raw("{")})
		if !errors.Is(err, teamster.ErrInternal) {
			t.Fatalf("got %v, want internal", err)
		}
	})
}

func TestValidReplySubject(t *testing.T) {
	for _, s := range []string{"_INBOX.abc", "_INBOX.gw1.a1", "reply", "a-b_c.D9", "a.b.c.d.e", "x" + strings.Repeat(".y", 255)} {
		if !bus.ValidReplySubject(s) {
			t.Errorf("ValidReplySubject(%q) = false, want true", s)
		}
	}
	for _, s := range []string{
		"", ".", "a.", ".a", "a..b", "*", ">", "a.*", "a.>", "a.*.b", "a b", "a\tb", "a\nb",
		"a\x00b", "é", "a.\x7f", strings.Repeat("a", 513),
	} {
		if bus.ValidReplySubject(s) {
			t.Errorf("ValidReplySubject(%q) = true, want false", s)
		}
	}
	if s := strings.Repeat("a", 512); !bus.ValidReplySubject(s) {
		t.Errorf("a reply subject of 512 bytes is refused")
	}
}

func TestReply(t *testing.T) {
	runDecodeCases(t, decodeReply, []decodeCase{
		validAs("ok", minReply, bus.OK()),
		valid("accepted", minReply.with("status", "accepted")),
		validAs("rejected with error", minReply.with("status", "rejected", "error", obj{"code": "owner_only", "message": "delegates cannot", "sideEffects": "none"}),
			&bus.Reply{V: 1, Status: "rejected", Error: &teamster.Error{Code: teamster.CodeOwnerOnly, Message: "delegates cannot", SideEffects: teamster.SideEffectsNone}}),
		valid("error null on ok", minReply.with("error", nil)),

		invalidReq("status missing", minReply.without("status")),
		invalidReq("status empty", minReply.with("status", "")),
		invalidReq("status fallback", minReply.with("status", "fallback")),
		invalidReq("status in capitals", minReply.with("status", "OK")),
		invalidReq("status as a number", minReply.with("status", 1)),
		invalidReq("rejected without error", minReply.with("status", "rejected")),
		invalidReq("ok with error", minReply.with("error", obj{"code": "internal"})),
		invalidReq("accepted with error", minReply.with("status", "accepted", "error", obj{"code": "internal"})),
		invalidReq("error with unknown code", minReply.with("status", "rejected", "error", obj{"code": "teapot"})),
		invalidReq("error without code", minReply.with("status", "rejected", "error", obj{"message": "x"})),
		invalidReq("error with empty code", minReply.with("status", "rejected", "error", obj{"code": ""})),
		invalidReq("error code in capitals", minReply.with("status", "rejected", "error", obj{"code": "INTERNAL"})),
		invalidReq("error with bad sideEffects", minReply.with("status", "rejected", "error", obj{"code": "internal", "sideEffects": "maybe"})),
		invalidReq("error as a string", minReply.with("status", "rejected", "error", "internal")),
		invalidReq("error code as a number", minReply.with("status", "rejected", "error", obj{"code": 3})),
	})
}

func TestRejected(t *testing.T) {
	t.Run("keeps the code of a teamster error", func(t *testing.T) {
		r := bus.Rejected(teamster.Errorf(teamster.CodeSessionBusy, "busy"))
		if !errors.Is(r.Err(), teamster.ErrSessionBusy) {
			t.Fatalf("Err() = %v, want session_busy", r.Err())
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("Rejected(...) does not validate: %v", err)
		}
	})
	t.Run("makes any other error internal", func(t *testing.T) {
		r := bus.Rejected(errors.New("boom"))
		if !errors.Is(r.Err(), teamster.ErrInternal) {
			t.Fatalf("Err() = %v, want internal", r.Err())
		}
	})
	t.Run("OK has no error", func(t *testing.T) {
		if err := bus.OK().Err(); err != nil {
			t.Fatalf("OK().Err() = %v, want nil", err)
		}
	})
	t.Run("survives the wire", func(t *testing.T) {
		b, err := bus.Encode(bus.Rejected(teamster.Errorf(teamster.CodeSourceRevoked, "gen 3")))
		if err != nil {
			t.Fatal(err)
		}
		var r bus.Reply
		if err := bus.Decode(b, &r); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(r.Err(), teamster.ErrSourceRevoked) || errors.Is(r.Err(), teamster.ErrInternal) {
			t.Fatalf("decoded Err() = %v, want source_revoked", r.Err())
		}
	})
}
