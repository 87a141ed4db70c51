package bus_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

func TestDecodeEvent(t *testing.T) {
	e := minEvent
	cases := []decodeCase{
		validAs("claimed", e, &bus.Event{V: 1, AttemptID: "a1", Seq: 1, Type: bus.EventClaimed, Data: raw(`{"fence":"e1:1","harnessId":"codex","workerId":"w1"}`)}),
		valid("data absent", e.without("data")),
		valid("data null", e.with("data", nil)),
		valid("data a string", e.with("data", "partial text")),
		valid("data an array", e.with("data", []int{1, 2})),
		valid("seq beyond 32 bits", e.with("seq", int64(1)<<40)),
		valid("attemptId of 64 characters", e.with("attemptId", idOfLen(64))),

		invalidReq("attemptId missing", e.without("attemptId")),
		invalidReq("seq missing", e.without("seq")),
		invalidReq("seq 0", e.with("seq", 0)),
		invalidReq("seq -1", e.with("seq", -1)),
		invalidReq("seq 1.5", e.with("seq", 1.5)),
		invalidReq("seq as a string", e.with("seq", "1")),
		invalidReq("type missing", e.without("type")),
		invalidReq("type unknown", e.with("type", "progress")),
		invalidReq("type in capitals", e.with("type", "CLAIMED")),
		invalidReq("type as a number", e.with("type", 1)),
		invalidReq("data with a syntax error", `{"v":1,"attemptId":"a1","seq":1,"type":"agent","data":{"a":}}`),
	}
	for _, typ := range []string{bus.EventClaimed, bus.EventPartial, bus.EventAgent, bus.EventTool, bus.EventUsage, bus.EventInjection, bus.EventResult} {
		if typ != bus.EventClaimed {
			cases = append(cases, valid("type "+typ, e.with("type", typ)))
		}
	}
	for _, bad := range badIDs() {
		cases = append(cases, invalidReq("attemptId "+bad.name, e.with("attemptId", bad.id)))
	}
	runDecodeCases(t, decodeEvent, cases)
}

func TestDecodeResult(t *testing.T) {
	r := minResult
	failed := func(status, code, sideEffects string) obj {
		return r.with("status", status, "error", obj{"code": code, "message": "m", "sideEffects": sideEffects})
	}
	cases := []decodeCase{
		validAs("ok", r, &bus.Result{V: 1, AttemptID: "a1", Status: teamster.StatusOK, AssistantTexts: []string{"hi"}, Usage: bus.Usage{OutputTokens: 3}}),
		validAs("ok with every field", r.with(
			"harnessId", "codex", "workerId", "w1", "fence", "01JD5Z:7", "classification", "reasoning-only",
			"lastToolError", obj{"tool": "search", "message": "timeout"}, "nativeSession", obj{"threadId": "t1"},
			"runtimeArtifact", obj{"id": "codex-cli", "fingerprint": "sha256:abc"},
		), &bus.Result{
			V: 1, AttemptID: "a1", Status: teamster.StatusOK, HarnessID: "codex", WorkerID: "w1", Fence: "01JD5Z:7",
			AssistantTexts: []string{"hi"}, Classification: bus.ClassReasoningOnly,
			LastToolError: raw(`{"message":"timeout","tool":"search"}`), NativeSession: raw(`{"threadId":"t1"}`),
			Usage: bus.Usage{OutputTokens: 3}, RuntimeArtifact: &bus.RuntimeArtifact{ID: "codex-cli", Fingerprint: "sha256:abc"},
		}),
		valid("ok without assistantTexts", r.without("assistantTexts")),
		valid("ok with empty assistantTexts", r.with("assistantTexts", []string{})),
		valid("ok without usage", r.without("usage")),
		valid("ok with error null", r.with("error", nil)),
		valid("classification empty", r.with("classification", "empty")),
		valid("classification planning-only", r.with("classification", "planning-only")),
		valid("lastToolError null", r.with("lastToolError", nil)),
		validAs("queue_timeout from the reaper, with no worker", failed("timeout", "queue_timeout", "none").without("usage", "assistantTexts"), &bus.Result{
			V: 1, AttemptID: "a1", Status: teamster.StatusTimeout,
			Error: &teamster.Error{Code: teamster.CodeQueueTimeout, Message: "m", SideEffects: teamster.SideEffectsNone},
		}),

		invalidReq("ok with error", r.with("error", obj{"code": "internal", "sideEffects": "none"})),
		invalidReq("error without error", r.with("status", "error")),
		invalidReq("timeout without error", r.with("status", "timeout")),
		invalidReq("cancelled without error", r.with("status", "cancelled")),
		invalidReq("timeout with code internal", failed("timeout", "internal", "none")),
		invalidReq("timeout with code cancelled", failed("timeout", "cancelled", "none")),
		invalidReq("cancelled with code deadline_exceeded", failed("cancelled", "deadline_exceeded", "none")),
		invalidReq("cancelled with code worker_lost", failed("cancelled", "worker_lost", "possible")),
		invalidReq("error with code queue_timeout", failed("error", "queue_timeout", "none")),
		invalidReq("error with code drain_timeout", failed("error", "drain_timeout", "possible")),
		invalidReq("ok with code internal", failed("ok", "internal", "none")),
		invalidReq("error without sideEffects", r.with("status", "error", "error", obj{"code": "harness_failed"})),
		invalidReq("error with sideEffects maybe", failed("error", "harness_failed", "maybe")),
		invalidReq("error with unknown code", failed("error", "exploded", "none")),
		invalidReq("error with empty code", failed("error", "", "none")),
		invalidReq("error as a string", r.with("status", "error", "error", "harness_failed")),
		invalidReq("status missing", r.without("status")),
		invalidReq("status done", r.with("status", "done")),
		invalidReq("status in capitals", r.with("status", "OK")),
		invalidReq("status accepted", r.with("status", "accepted")),
		invalidReq("classification unknown", r.with("classification", "silent")),
		invalidReq("usage.outputTokens -1", r.with("usage", obj{"outputTokens": -1})),
		invalidReq("usage.outputTokens 1.5", r.with("usage", obj{"outputTokens": 1.5})),
		invalidReq("usage as a number", r.with("usage", 3)),
		invalidReq("assistantTexts as a string", r.with("assistantTexts", "hi")),
		invalidReq("assistantTexts holding a number", r.with("assistantTexts", []any{1})),
		invalidReq("attemptId missing", r.without("attemptId")),
		invalidReq("harnessId 'a.b'", r.with("harnessId", "a.b")),
		invalidReq("workerId '*'", r.with("workerId", "*")),
		invalidReq("workerId of 65 characters", r.with("workerId", idOfLen(65))),
		invalidReq("runtimeArtifact as a string", r.with("runtimeArtifact", "x")),
	}
	// Every code with the status it implies is a valid failed result.
	for _, code := range allCodes {
		cases = append(cases, valid("status follows code "+string(code), failed(string(code.ResultStatus()), string(code), "possible")))
	}
	for _, bad := range badIDs() {
		cases = append(cases, invalidReq("attemptId "+bad.name, r.with("attemptId", bad.id)))
	}
	runDecodeCases(t, decodeResult, cases)
}

// allCodes lists every code of the contract.
var allCodes = []teamster.Code{
	teamster.CodeInvalidRequest, teamster.CodePayloadTooLarge, teamster.CodeHarnessNotRegistered,
	teamster.CodeHarnessUnsupportedRoute, teamster.CodeDelegationDenied, teamster.CodeOwnerOnly,
	teamster.CodeSessionBusy, teamster.CodeNoActiveRun, teamster.CodeInjectionRequiresV2,
	teamster.CodeSourceRevoked, teamster.CodeQueueTimeout, teamster.CodeWorkerLost, teamster.CodeLeaseLost,
	teamster.CodeDeadlineExceeded, teamster.CodeCancelled, teamster.CodeDrainTimeout,
	teamster.CodeRuntimeArtifactMismatch, teamster.CodeHarnessFailed, teamster.CodeInternal,
}

func TestNewErrorResult(t *testing.T) {
	for _, code := range allCodes {
		t.Run(string(code), func(t *testing.T) {
			r := bus.NewErrorResult("a1", teamster.Errorf(code, "x").WithSideEffects(teamster.SideEffectsPossible))
			if r.Status != code.ResultStatus() {
				t.Errorf("status %s, want %s", r.Status, code.ResultStatus())
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("NewErrorResult does not validate: %v", err)
			}
			if !errors.Is(r.Err(), &teamster.Error{Code: code}) {
				t.Errorf("Err() = %v, want code %s", r.Err(), code)
			}
			b, err := bus.Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			checkRoundTrip(t, decodeResult, r)
			if want := `"assistantTexts":[]`; !strings.Contains(string(b), want) {
				t.Errorf("encoded result %s lacks %s", b, want)
			}
		})
	}
	t.Run("without sideEffects it does not validate", func(t *testing.T) {
		r := bus.NewErrorResult("a1", teamster.Errorf(teamster.CodeHarnessFailed, "x"))
		if err := r.Validate(); !errors.Is(err, teamster.ErrInvalidRequest) {
			t.Fatalf("Validate() = %v, want invalid_request", err)
		}
	})
	t.Run("ok result has no Err", func(t *testing.T) {
		r := &bus.Result{V: 1, AttemptID: "a1", Status: teamster.StatusOK}
		if err := r.Err(); err != nil {
			t.Fatalf("Err() = %v, want nil", err)
		}
	})
}

// AppendEvent writes what Encode writes, byte for byte, and what it writes
// decodes back to the event.
func TestAppendEventMatchesEncode(t *testing.T) {
	result := mustEncode(t, &bus.Result{V: bus.Version, AttemptID: "01M8NTV8NGD47D740B0PBXG15Q", Status: teamster.StatusOK,
		HarnessID: "codex", WorkerID: "w1", Fence: "e:1", AssistantTexts: []string{"héllo <b>\"x\"</b>\n"}})
	events := []*bus.Event{
		{V: bus.Version, AttemptID: "01M8NTV8NGD47D740B0PBXG15Q", Seq: 1, Type: bus.EventClaimed, Data: []byte(`{"workerId":"w1","harnessId":"codex","fence":"e:1"}`)},
		{V: bus.Version, AttemptID: "a-1_b", Seq: 9007199254740993, Type: bus.EventResult, Data: result},
		{V: bus.Version, AttemptID: "a", Seq: 2, Type: bus.EventPartial},
		// Not valid as identifiers, but the encoder must still be exact.
		{V: bus.Version, AttemptID: `odd"<id>&\`, Seq: 3, Type: "t\u00e9", Data: []byte(`{}`)},
	}
	for _, e := range events {
		want, err := bus.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := bus.AppendEvent([]byte("prefix"), e)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "prefix"+string(want) {
			t.Errorf("AppendEvent(%+v)\n got %s\nwant prefix%s", e, got, want)
		}
		var back bus.Event
		if err := json.Unmarshal(got[len("prefix"):], &back); err != nil {
			t.Fatalf("decode %s: %v", got, err)
		}
		if back.AttemptID != e.AttemptID || back.Seq != e.Seq || back.Type != e.Type || string(back.Data) != string(e.Data) {
			t.Errorf("round trip of %+v gave %+v", e, back)
		}
	}
}
