package bus_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// Fuzz targets, one per envelope type. Each asserts, for any input, that
// decoding does not panic; that every error is a *teamster.Error with code
// invalid_request (payload_too_large exactly for bodies over MaxBody) and a
// short valid UTF-8 message; and that a decoded value survives an
// Encode/decode round trip unchanged. Valid bodies are added here as seeds;
// testdata/fuzz/<target>/ holds edge cases and regression seeds (seed-long-*:
// a 2000-digit number and long non-ASCII values, which the original decoder
// echoed in full or cut inside a UTF-8 sequence).
//
//	go test ./bus -run='^$' -fuzz='^FuzzDecodeSubmit$' -fuzztime=20s

// addSeeds adds bodies to f's seed corpus.
func addSeeds(f *testing.F, bodies ...obj) {
	for _, b := range bodies {
		f.Add([]byte(b.String()))
	}
}

// fuzzDecode runs the common fuzz body for dec, seeded with bodies.
func fuzzDecode(f *testing.F, dec decoder, bodies ...obj) {
	addSeeds(f, bodies...)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := dec(b)
		if err != nil {
			checkDecodeError(t, b, err)
			return
		}
		checkRoundTrip(t, dec, v)
	})
}

// FuzzDecodeSubmit also asserts that no body holding a delegate key, in any
// case, ever decodes as a submit.
func FuzzDecodeSubmit(f *testing.F) {
	addSeeds(f, minAttempt, fullAttempt, minAttempt.with("delegate", nil), minAttempt.with("Delegate", "voice-call"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeSubmit(b)
		if err != nil {
			checkDecodeError(t, b, err)
			return
		}
		if hasDelegateKey(b) {
			t.Fatalf("a submit body with a delegate key decoded: %q", b)
		}
		checkRoundTrip(t, decodeSubmit, v)
	})
}

// hasDelegateKey reports whether b is a JSON object with a key that
// encoding/json matches to a field named delegate (case-insensitively).
func hasDelegateKey(b []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	for k := range m {
		if strings.EqualFold(k, "delegate") {
			return true
		}
	}
	return false
}

func FuzzDecodeAttempt(f *testing.F) {
	fuzzDecode(f, decodeAttempt, minAttempt, fullAttempt, minAttempt.with("delegate", "voice-call"))
}

func FuzzDecodeSubmitReply(f *testing.F) {
	fuzzDecode(f, decodeSubmitReply, minSubmitReply,
		minSubmitReply.with("selection", obj{
			"provider": "openai", "modelId": "gpt-5", "runtime": "auto", "runtimeSource": "auto",
			"selectedHarnessId": "codex", "selectedReason": "auto_plugin", "notes": []string{"n"},
			"candidates": []obj{{"id": "codex", "label": "Codex", "pluginId": "codex", "supported": true, "priority": 100, "reason": "r"}},
		}),
		obj{"v": 1, "status": "rejected", "error": obj{"code": "harness_unsupported_route", "message": "m", "sideEffects": "none"}})
}

func FuzzDecodeEvent(f *testing.F) {
	fuzzDecode(f, decodeEvent, minEvent, minEvent.with("type", "partial", "seq", 7, "data", "text <b>"),
		minEvent.with("type", "injection", "data", obj{"injectionId": "i1", "state": "rejected", "code": "source_revoked"}))
}

func FuzzDecodeResult(f *testing.F) {
	fuzzDecode(f, decodeResult, minResult,
		minResult.with("harnessId", "codex", "workerId", "w1", "fence", "e:1", "classification", "empty",
			"lastToolError", obj{"m": 1}, "nativeSession", obj{"t": "x"}, "runtimeArtifact", obj{"id": "i", "fingerprint": "f"}),
		minResult.with("status", "timeout", "error", obj{"code": "queue_timeout", "message": "m", "sideEffects": "none"}))
}

func FuzzDecodeInjectRequest(f *testing.F) {
	fuzzDecode(f, decodeInjectRequest, minInject,
		minInject.with("authorityKind", "source-bound", "source", obj{"id": "src-1", "generation": 2}, "images", []obj{{"a": 1}}, "debounceMs", 250),
		minInject.with("authorityKind", "source-bound", "hostAssertion", "as-1"))
}

func FuzzDecodeReplyMedia(f *testing.F) {
	fuzzDecode(f, decodeReplyMedia, minReplyMedia)
}

func FuzzDecodeRunRead(f *testing.F) {
	fuzzDecode(f, decodeRunRead, minRead, minRead.with("offset", 524288, "path", "a/b/c.txt"))
}

func FuzzDecodeRunReadReply(f *testing.F) {
	fuzzDecode(f, decodeRunReadReply, minReadRep, obj{"v": 1, "status": "rejected", "reason": "not_found", "error": obj{"code": "invalid_request"}})
}

func FuzzDecodeAssertCurrent(f *testing.F) {
	fuzzDecode(f, decodeAssertCurrent, minAssert)
}

func FuzzDecodeAssertCurrentReply(f *testing.F) {
	fuzzDecode(f, decodeAssertCurrentReply, minAssertRep, obj{"v": 1, "status": "rejected", "error": obj{"code": "invalid_request"}})
}

func FuzzDecodeInjectReply(f *testing.F) {
	fuzzDecode(f, decodeInjectReply, minInjectReply, obj{"v": 1, "status": "rejected", "error": obj{"code": "no_active_run"}})
}

func FuzzDecodeSourceGrant(f *testing.F) {
	fuzzDecode(f, decodeSourceGrant, minSourceGrant, minSourceGrant.with("generation", 9007199254740993))
}

func FuzzDecodeSourceRevoke(f *testing.F) {
	fuzzDecode(f, decodeSourceRevoke, minSourceRevoke)
}

func FuzzDecodeCancelRequest(f *testing.F) {
	fuzzDecode(f, decodeCancelRequest, minCancel, minCancel.with("reason", "user stop"))
}

func FuzzDecodeSessionOp(f *testing.F) {
	fuzzDecode(f, decodeSessionOp, minSessionOp,
		minSessionOp.with("sessionId", "s", "storePath", "/p", "agentId", "main", "agentHarnessId", "codex", "modelSelectionLocked", true))
}

func FuzzDecodeToolCall(f *testing.F) {
	fuzzDecode(f, decodeToolCall, minToolCall, minToolCall.with("args", []any{1, "x", nil}))
}

func FuzzDecodeToolReply(f *testing.F) {
	fuzzDecode(f, decodeToolReply, minToolReply, obj{"v": 1, "status": "rejected", "error": obj{"code": "deadline_exceeded"}})
}

func FuzzDecodeToolTerminal(f *testing.F) {
	fuzzDecode(f, decodeToolTerminal, minToolTerminal,
		minToolTerminal.with("outcome", "failure", "executionStarted", false, "error", obj{"message": "denied"}))
}

func FuzzDecodeToolTerminalReply(f *testing.F) {
	fuzzDecode(f, decodeToolTerminalReply, minToolTermRep, minToolTermRep.with("lastToolError", obj{"tool": "t"}))
}

func FuzzDecodeUserInput(f *testing.F) {
	fuzzDecode(f, decodeUserInput, minUserInput, minUserInput.with("choices", []string{"a", "b"}))
}

func FuzzDecodeUserInputReply(f *testing.F) {
	fuzzDecode(f, decodeUserInputReply, minUserInputRep, obj{"v": 1, "status": "rejected", "error": obj{"code": "deadline_exceeded"}})
}

func FuzzDecodeUsageReport(f *testing.F) {
	fuzzDecode(f, decodeUsageReport, minUsageReport, minUsageReport.with("outputTokens", -3))
}

func FuzzDecodeWorkerControl(f *testing.F) {
	fuzzDecode(f, decodeWorkerControl, minWorkerCtl, minWorkerCtl.with("op", "drain"))
}

func FuzzDecodeWorkerControlReply(f *testing.F) {
	fuzzDecode(f, decodeWorkerControlReply, minWorkerCtlRep, obj{"v": 1, "status": "rejected", "error": obj{"code": "invalid_request"}})
}

func FuzzDecodeWorkerEntry(f *testing.F) {
	fuzzDecode(f, decodeWorkerEntry, minWorkerEntry, minWorkerEntry.with("attempts", []string{"a1"}, "version", "v0.1.0",
		"harnesses", []obj{{
			"id": "codex", "label": "Codex", "pluginId": "codex", "autoSelection": obj{"providerIds": []string{"openai"}},
			"priority": 100, "delegatedExecutionPluginIds": []string{"voice-call"}, "authBootstrap": "harness",
			"fallbackRuntime": "openclaw", "reproducesRequestOverrides": true, "injection": "v1", "capabilities": []string{"reset"},
		}, {"id": "claude-cli", "autoSelection": obj{"providerIds": []string{}}}}))
}

func FuzzDecodeReply(f *testing.F) {
	fuzzDecode(f, decodeReply, minReply, obj{"v": 1, "status": "rejected", "error": obj{"code": "owner_only", "message": "m", "sideEffects": "possible"}})
}
