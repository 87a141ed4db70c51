package bus_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

func TestDecodeInjectRequest(t *testing.T) {
	r := minInject
	bound := r.with("authorityKind", "source-bound", "source", obj{"id": "src-1", "generation": 3})
	cases := []decodeCase{
		validAs("run authority by sessionKey", r, &bus.InjectRequest{V: 1, SessionKey: "agent:main:main", Text: "also check the tests", AuthorityKind: bus.AuthorityRun}),
		valid("run authority by attemptId", r.without("sessionKey").with("attemptId", "a1")),
		valid("no address (a run subject carries the attempt)", r.without("sessionKey")),
		validAs("source-bound with source", bound, &bus.InjectRequest{
			V: 1, SessionKey: "agent:main:main", Text: "also check the tests", AuthorityKind: bus.AuthoritySourceBound,
			Source: &bus.SourceRef{ID: "src-1", Generation: 3},
		}),
		validAs("source-bound with the host's assertion", r.with("authorityKind", "source-bound", "hostAssertion", "as-1"), &bus.InjectRequest{
			V: 1, SessionKey: "agent:main:main", Text: "also check the tests", AuthorityKind: bus.AuthoritySourceBound, HostAssertion: "as-1",
		}),
		valid("source-bound with source and the host's assertion", bound.with("hostAssertion", "as-1")),
		valid("run with source null", r.with("source", nil)),
		valid("debounceMs 0", r.with("debounceMs", 0)),
		valid("debounceMs 60000", r.with("debounceMs", 60_000)),
		valid("images objects", r.with("images", []obj{{"type": "image", "data": "aGk="}})),
		valid("text with newlines", r.with("text", "a\nb")),

		invalidReq("text missing", r.without("text")),
		invalidReq("text empty", r.with("text", "")),
		invalidReq("text as an object", r.with("text", obj{})),
		invalidReq("authorityKind missing", r.without("authorityKind")),
		invalidReq("authorityKind unknown", r.with("authorityKind", "owner")),
		invalidReq("authorityKind in other form", r.with("authorityKind", "source_bound")),
		invalidReq("run with source", r.with("source", obj{"id": "src-1", "generation": 1})),
		invalidReq("run with a host assertion", r.with("hostAssertion", "as-1")),
		invalidReq("hostAssertion as a number", bound.with("hostAssertion", 1)),
		invalidReq("source-bound without source", bound.without("source")),
		invalidReq("source-bound with source null", bound.with("source", nil)),
		invalidReq("source without id", bound.with("source", obj{"generation": 1})),
		invalidReq("source.id 'a.b'", bound.with("source", obj{"id": "a.b", "generation": 1})),
		invalidReq("source.generation 0", bound.with("source", obj{"id": "src-1", "generation": 0})),
		invalidReq("source.generation -1", bound.with("source", obj{"id": "src-1", "generation": -1})),
		invalidReq("source.generation as a string", bound.with("source", obj{"id": "src-1", "generation": "1"})),
		invalidReq("source as a string", bound.with("source", "src-1")),
		invalidReq("debounceMs -1", r.with("debounceMs", -1)),
		invalidReq("debounceMs 60001", r.with("debounceMs", 60_001)),
		invalidReq("debounceMs 1.5", r.with("debounceMs", 1.5)),
		invalidReq("image as a string", r.with("images", []any{"aGk="})),
		invalidReq("image null", r.with("images", []any{nil})),
		invalidReq("sessionKey of 1025 bytes", r.with("sessionKey", strings.Repeat("k", 1025))),
		invalidReq("sessionKey with a newline", r.with("sessionKey", "k\n")),
	}
	for _, bad := range badIDs() {
		if bad.id != "" {
			cases = append(cases, invalidReq("attemptId "+bad.name, r.with("attemptId", bad.id)))
		}
		cases = append(cases, invalidReq("source.id "+bad.name, bound.with("source", obj{"id": bad.id, "generation": 1})))
		if bad.id != "" {
			cases = append(cases, invalidReq("hostAssertion "+bad.name, bound.with("hostAssertion", bad.id)))
		}
	}
	runDecodeCases(t, decodeInjectRequest, cases)
}

func TestDecodeRunRead(t *testing.T) {
	r := minRead
	cases := []decodeCase{
		validAs("minimal", r, &bus.RunRead{V: 1, Token: "t1", Path: "out/a.png", Length: 1024}),
		valid("offset", r.with("offset", 524288)),
		valid("length at the chunk limit", r.with("length", bus.MaxReadChunk)),
		valid("a dotted name", r.with("path", "a/.hidden/b..c")),
		invalidReq("token missing", r.without("token")),
		invalidReq("token with a dot", r.with("token", "a.b")),
		invalidReq("path missing", r.without("path")),
		invalidReq("length 0", r.with("length", 0)),
		invalidReq("length over the chunk limit", r.with("length", bus.MaxReadChunk+1)),
		invalidReq("offset negative", r.with("offset", -1)),
		invalidReq("path with a NUL", r.with("path", "a\x00b")),
		invalidReq("path of 4097 bytes", r.with("path", strings.Repeat("a", 4097))),
	}
	for _, p := range []string{"/etc/passwd", "..", "../x", "a/../../x", "a/../b", "./a", "a/./b", "a//b", "a/", ".", `a\b`, "C:\\x"} {
		cases = append(cases, invalidReq("path "+strconv.Quote(p), r.with("path", p)))
	}
	runDecodeCases(t, decodeRunRead, cases)
}

func TestDecodeRunReadReply(t *testing.T) {
	r := minReadRep
	runDecodeCases(t, decodeRunReadReply, []decodeCase{
		validAs("data", r, &bus.RunReadReply{V: 1, Status: "ok", Data: []byte("hi"), Size: 2, EOF: true}),
		valid("not found", obj{"v": 1, "status": "rejected", "reason": "not_found", "error": obj{"code": "invalid_request"}}),
		valid("no run", obj{"v": 1, "status": "rejected", "error": obj{"code": "no_active_run"}}),
		invalidReq("unknown reason", obj{"v": 1, "status": "rejected", "reason": "gone", "error": obj{"code": "invalid_request"}}),
		invalidReq("data not base64", r.with("data", "%%%")),
		invalidReq("size negative", r.with("size", -1)),
		invalidReq("rejected without error", r.with("status", "rejected")),
	})
}

func TestDecodeAssertCurrent(t *testing.T) {
	cases := []decodeCase{
		validAs("minimal", minAssert, &bus.AssertCurrent{V: 1, Assertion: "as-1"}),
		invalidReq("assertion missing", minAssert.without("assertion")),
		invalidReq("assertion as a number", minAssert.with("assertion", 1)),
	}
	for _, bad := range badIDs() {
		if bad.id != "" {
			cases = append(cases, invalidReq("assertion "+bad.name, minAssert.with("assertion", bad.id)))
		}
	}
	runDecodeCases(t, decodeAssertCurrent, cases)
}

func TestDecodeAssertCurrentReply(t *testing.T) {
	runDecodeCases(t, decodeAssertCurrentReply, []decodeCase{
		validAs("current", minAssertRep, &bus.AssertCurrentReply{V: 1, Status: "ok", Current: true}),
		validAs("no longer current", minAssertRep.with("current", false), &bus.AssertCurrentReply{V: 1, Status: "ok"}),
		valid("current missing reads false", minAssertRep.without("current")),
		valid("rejected", obj{"v": 1, "status": "rejected", "error": obj{"code": "invalid_request"}}),
		invalidReq("current as a string", minAssertRep.with("current", "true")),
		invalidReq("rejected without error", minAssertRep.with("status", "rejected")),
		invalidReq("status accepted", minAssertRep.with("status", "accepted")),
	})
}

func TestDecodeInjectReply(t *testing.T) {
	r := minInjectReply
	rejected := obj{"v": 1, "status": "rejected", "error": obj{"code": "injection_requires_v2"}}
	runDecodeCases(t, decodeInjectReply, []decodeCase{
		validAs("accepted", r, &bus.InjectReply{V: 1, Status: "accepted", InjectionID: "i1", AttemptID: "a1"}),
		validAs("rejected", rejected, &bus.InjectReply{V: 1, Status: "rejected", Error: &teamster.Error{Code: teamster.CodeInjectionRequiresV2}}),
		valid("rejected naming the attempt", rejected.with("attemptId", "a1")),

		invalidReq("accepted without injectionId", r.without("injectionId")),
		invalidReq("accepted with injectionId holding a newline", r.with("injectionId", "i\n1")),
		invalidReq("accepted without attemptId", r.without("attemptId")),
		invalidReq("accepted with attemptId 'a.b'", r.with("attemptId", "a.b")),
		invalidReq("rejected with attemptId '*'", rejected.with("attemptId", "*")),
		invalidReq("status ok", r.with("status", "ok")),
		invalidReq("status missing", r.without("status")),
		invalidReq("rejected without error", r.with("status", "rejected")),
		invalidReq("accepted with error", r.with("error", obj{"code": "internal"})),
		invalidReq("error with unknown code", rejected.with("error", obj{"code": "injection_requires_v3"})),
		invalidReq("injectionId as a number", r.with("injectionId", 1)),
	})
}

func TestDecodeSourceGrant(t *testing.T) {
	g := minSourceGrant
	cases := []decodeCase{
		validAs("generation 1", g, &bus.SourceGrant{V: 1, ID: "src-1", Generation: 1}),
		valid("largest generation, 2^53-1", g.with("generation", int64(1)<<53-1)),
		invalidReq("generation 2^53, not exact in every reader", g.with("generation", int64(1)<<53)),
		valid("id of 64 characters", g.with("id", idOfLen(64))),

		invalidReq("id missing", g.without("id")),
		invalidReq("generation missing", g.without("generation")),
		invalidReq("generation 0", g.with("generation", 0)),
		invalidReq("generation -1", g.with("generation", -1)),
		invalidReq("generation 1.5", g.with("generation", 1.5)),
		invalidReq("generation as a string", g.with("generation", "1")),
		invalidReq("id as a number", g.with("id", 1)),
	}
	for _, bad := range badIDs() {
		cases = append(cases, invalidReq("id "+bad.name, g.with("id", bad.id)))
	}
	runDecodeCases(t, decodeSourceGrant, cases)
}

func TestDecodeSourceRevoke(t *testing.T) {
	r := minSourceRevoke
	cases := []decodeCase{
		validAs("id", r, &bus.SourceRevoke{V: 1, ID: "src-1"}),
		valid("a generation is ignored", r.with("generation", 4)),
		invalidReq("id missing", r.without("id")),
		invalidReq("id null", r.with("id", nil)),
		invalidReq("id as an array", r.with("id", []string{"src-1"})),
	}
	for _, bad := range badIDs() {
		cases = append(cases, invalidReq("id "+bad.name, r.with("id", bad.id)))
	}
	runDecodeCases(t, decodeSourceRevoke, cases)
}

func TestDecodeCancelRequest(t *testing.T) {
	c := minCancel
	runDecodeCases(t, decodeCancelRequest, []decodeCase{
		validAs("no reason", c, &bus.CancelRequest{V: 1}),
		validAs("with reason", c.with("reason", "user pressed stop"), &bus.CancelRequest{V: 1, Reason: "user pressed stop"}),
		valid("reason of 256 bytes", c.with("reason", strings.Repeat("r", 256))),
		invalidReq("reason of 257 bytes", c.with("reason", strings.Repeat("r", 257))),
		invalidReq("reason with a newline", c.with("reason", "a\nb")),
		invalidReq("reason as a number", c.with("reason", 1)),
	})
}

func TestDecodeSessionOp(t *testing.T) {
	s := minSessionOp
	runDecodeCases(t, decodeSessionOp, []decodeCase{
		validAs("sessionKey only", s, &bus.SessionOp{V: 1, SessionKey: "agent:main:main"}),
		validAs("every field", s.with("sessionId", "s-1", "storePath", "/s.json", "agentId", "main", "agentHarnessId", "codex", "modelSelectionLocked", false),
			&bus.SessionOp{V: 1, SessionKey: "agent:main:main", SessionID: "s-1", StorePath: "/s.json", AgentID: "main", AgentHarnessID: "codex", ModelSelectionLocked: ptr(false)}),
		valid("modelSelectionLocked null", s.with("modelSelectionLocked", nil)),

		invalidReq("sessionKey missing", s.without("sessionKey")),
		invalidReq("sessionKey empty", s.with("sessionKey", "")),
		invalidReq("sessionKey of 1025 bytes", s.with("sessionKey", strings.Repeat("k", 1025))),
		invalidReq("sessionKey with a control character", s.with("sessionKey", "k\x01")),
		invalidReq("sessionId with a newline", s.with("sessionId", "s\n")),
		invalidReq("storePath of 1025 bytes", s.with("storePath", strings.Repeat("p", 1025))),
		invalidReq("agentId of 257 bytes", s.with("agentId", strings.Repeat("a", 257))),
		invalidReq("agentHarnessId 'a.b'", s.with("agentHarnessId", "a.b")),
		invalidReq("agentHarnessId '>'", s.with("agentHarnessId", ">")),
		invalidReq("agentHarnessId of 65 characters", s.with("agentHarnessId", idOfLen(65))),
		invalidReq("modelSelectionLocked as a string", s.with("modelSelectionLocked", "yes")),
	})
}

func TestDecodeToolCall(t *testing.T) {
	c := minToolCall
	runDecodeCases(t, decodeToolCall, []decodeCase{
		validAs("with args", c, &bus.ToolCall{V: 1, CallID: "c1", Name: "search", Args: raw(`{"q":"nats"}`)}),
		valid("without args", c.without("args")),
		valid("args an array", c.with("args", []int{1})),
		valid("args null", c.with("args", nil)),

		invalidReq("callId missing", c.without("callId")),
		invalidReq("callId as a number", c.with("callId", 1)),
		invalidReq("callId with a newline", c.with("callId", "c\n")),
		invalidReq("callId of 257 bytes", c.with("callId", strings.Repeat("c", 257))),
		invalidReq("name missing", c.without("name")),
		invalidReq("name empty", c.with("name", "")),
		invalidReq("name with a tab", c.with("name", "a\tb")),
		invalidReq("args with a syntax error", `{"v":1,"callId":"c1","name":"t","args":{"q":]}`),
	})
}

func TestDecodeToolReply(t *testing.T) {
	r := minToolReply
	runDecodeCases(t, decodeToolReply, []decodeCase{
		validAs("ok with result", r, &bus.ToolReply{V: 1, Status: "ok", Result: raw(`{"hits":1}`)}),
		valid("ok without result", r.without("result")),
		valid("result a string", r.with("result", "done")),
		valid("rejected with error", obj{"v": 1, "status": "rejected", "error": obj{"code": "deadline_exceeded"}}),

		invalidReq("status accepted", r.with("status", "accepted")),
		invalidReq("status missing", r.without("status")),
		invalidReq("ok with error", r.with("error", obj{"code": "internal"})),
		invalidReq("rejected without error", r.with("status", "rejected")),
		invalidReq("error with unknown code", obj{"v": 1, "status": "rejected", "error": obj{"code": "tool_failed"}}),
	})
}

func TestDecodeToolTerminal(t *testing.T) {
	tt := minToolTerminal
	runDecodeCases(t, decodeToolTerminal, []decodeCase{
		validAs("success", tt, &bus.ToolTerminal{V: 1, CallID: "c1", Name: "search", Args: raw(`{"q":"nats"}`), ExecutionStarted: true, Outcome: bus.OutcomeSuccess}),
		validAs("failure with error", tt.with("outcome", "failure", "executionStarted", false, "error", obj{"message": "denied"}),
			&bus.ToolTerminal{V: 1, CallID: "c1", Name: "search", Args: raw(`{"q":"nats"}`), Outcome: bus.OutcomeFailure, Error: raw(`{"message":"denied"}`)}),
		valid("without args", tt.without("args")),
		valid("executionStarted absent", tt.without("executionStarted")),

		invalidReq("outcome missing", tt.without("outcome")),
		invalidReq("outcome partial", tt.with("outcome", "partial")),
		invalidReq("outcome in capitals", tt.with("outcome", "SUCCESS")),
		invalidReq("callId missing", tt.without("callId")),
		invalidReq("name missing", tt.without("name")),
		invalidReq("name with a newline", tt.with("name", "a\n")),
		invalidReq("executionStarted as a string", tt.with("executionStarted", "true")),
		invalidReq("outcome as a boolean", tt.with("outcome", true)),
	})
}

func TestDecodeToolTerminalReply(t *testing.T) {
	r := minToolTermRep
	runDecodeCases(t, decodeToolTerminalReply, []decodeCase{
		validAs("ok", r, &bus.ToolTerminalReply{V: 1, Status: "ok"}),
		validAs("ok with lastToolError", r.with("lastToolError", obj{"tool": "search"}), &bus.ToolTerminalReply{V: 1, Status: "ok", LastToolError: raw(`{"tool":"search"}`)}),
		valid("rejected with error", r.with("status", "rejected", "error", obj{"code": "invalid_request", "message": "unknown callId"})),

		invalidReq("status accepted", r.with("status", "accepted")),
		invalidReq("status missing", r.without("status")),
		invalidReq("ok with error", r.with("error", obj{"code": "internal"})),
		invalidReq("rejected without error", r.with("status", "rejected")),
		invalidReq("error with unknown code", r.with("status", "rejected", "error", obj{"code": "bad"})),
	})
}

func TestDecodeUserInput(t *testing.T) {
	u := minUserInput
	runDecodeCases(t, decodeUserInput, []decodeCase{
		validAs("question", u, &bus.UserInput{V: 1, Question: "Which branch?"}),
		validAs("with choices", u.with("choices", []string{"main", "dev"}), &bus.UserInput{V: 1, Question: "Which branch?", Choices: []string{"main", "dev"}}),
		valid("question with newlines", u.with("question", "Which\nbranch?")),

		invalidReq("question missing", u.without("question")),
		invalidReq("question empty", u.with("question", "")),
		invalidReq("question as a number", u.with("question", 1)),
		invalidReq("choices as a string", u.with("choices", "main")),
		invalidReq("choices holding a number", u.with("choices", []any{1})),
	})
}

func TestDecodeUserInputReply(t *testing.T) {
	r := minUserInputRep
	runDecodeCases(t, decodeUserInputReply, []decodeCase{
		validAs("ok with answer", r, &bus.UserInputReply{V: 1, Status: "ok", Answer: "main"}),
		valid("ok with empty answer", r.with("answer", "")),
		valid("rejected", obj{"v": 1, "status": "rejected", "error": obj{"code": "deadline_exceeded"}}),

		invalidReq("status accepted", r.with("status", "accepted")),
		invalidReq("status missing", r.without("status")),
		invalidReq("ok with error", r.with("error", obj{"code": "internal"})),
		invalidReq("rejected without error", r.with("status", "rejected")),
		invalidReq("answer as a number", r.with("answer", 1)),
		invalidReq("error with unknown code", obj{"v": 1, "status": "rejected", "error": obj{"code": "timeout"}}),
	})
}

func TestDecodeUsageReport(t *testing.T) {
	u := minUsageReport
	runDecodeCases(t, decodeUsageReport, []decodeCase{
		validAs("report", u, &bus.UsageReport{V: 1, ResponseID: "resp-1", OutputTokens: 12}),
		// Non-positive counts are valid on the wire; they emit nothing.
		valid("outputTokens 0", u.with("outputTokens", 0)),
		valid("outputTokens -1", u.with("outputTokens", -1)),
		valid("outputTokens absent", u.without("outputTokens")),

		invalidReq("responseId missing", u.without("responseId")),
		invalidReq("responseId with a newline", u.with("responseId", "r\n")),
		invalidReq("responseId of 257 bytes", u.with("responseId", strings.Repeat("r", 257))),
		invalidReq("outputTokens 1.5", u.with("outputTokens", 1.5)),
		invalidReq("outputTokens as a string", u.with("outputTokens", "12")),
	})
}

func TestDecodeWorkerControl(t *testing.T) {
	c := minWorkerCtl
	runDecodeCases(t, decodeWorkerControl, []decodeCase{
		validAs("status", c, &bus.WorkerControl{V: 1, Op: bus.ControlStatus}),
		valid("drain", c.with("op", "drain")),
		valid("resume", c.with("op", "resume")),

		invalidReq("op missing", c.without("op")),
		invalidReq("op stop", c.with("op", "stop")),
		invalidReq("op in capitals", c.with("op", "DRAIN")),
		invalidReq("op as a number", c.with("op", 1)),
	})
}

func TestDecodeWorkerControlReply(t *testing.T) {
	r := minWorkerCtlRep
	runDecodeCases(t, decodeWorkerControlReply, []decodeCase{
		validAs("ok", r, &bus.WorkerControlReply{V: 1, Status: "ok", State: bus.WorkerActive, Running: 1, Attempts: []string{"a1"}}),
		valid("draining with no runs", r.with("state", "draining", "running", 0, "attempts", []string{})),
		valid("rejected", obj{"v": 1, "status": "rejected", "error": obj{"code": "invalid_request"}}),

		invalidReq("status accepted", r.with("status", "accepted")),
		invalidReq("ok with error", r.with("error", obj{"code": "internal"})),
		invalidReq("rejected without error", r.with("status", "rejected")),
		invalidReq("ok without state", r.without("state")),
		invalidReq("state unknown", r.with("state", "sleeping")),
		invalidReq("running -1", r.with("running", -1)),
		invalidReq("running as a string", r.with("running", "1")),
		invalidReq("attempts holding 'a.b'", r.with("attempts", []string{"a1", "a.b"})),
		invalidReq("attempts holding an empty id", r.with("attempts", []string{""})),
		invalidReq("attempts as a string", r.with("attempts", "a1")),
	})
}

func TestDecodeWorkerEntry(t *testing.T) {
	w := minWorkerEntry
	harness := func(m obj) obj { return w.with("harnesses", []obj{m}) }
	cases := []decodeCase{
		validAs("active", w, &bus.WorkerEntry{
			V: 1, WorkerID: "w1", State: bus.WorkerActive,
			Harnesses: []selection.Manifest{{ID: "codex", PluginID: "codex", Injection: selection.InjectionV2}},
			Slots:     4, HeartbeatMs: 1700000000000, StartedMs: 1700000000000,
		}),
		valid("every state: starting", w.with("state", "starting")),
		valid("every state: draining", w.with("state", "draining")),
		valid("every state: stopped", w.with("state", "stopped")),
		valid("no harnesses", w.with("harnesses", []obj{})),
		valid("running attempts", w.with("inFlight", 2, "attempts", []string{"a1", "a2"})),
		valid("full manifest", harness(obj{
			"id": "codex", "label": "Codex", "pluginId": "codex", "autoSelection": obj{"providerIds": []string{"openai"}},
			"priority": 100, "delegatedExecutionPluginIds": []string{"voice-call"}, "authBootstrap": "harness",
			"fallbackRuntime": "openclaw", "reproducesRequestOverrides": true, "injection": "v1", "capabilities": []string{"reset"},
		})),

		invalidReq("workerId missing", w.without("workerId")),
		invalidReq("state missing", w.without("state")),
		invalidReq("state unknown", w.with("state", "zombie")),
		invalidReq("slots -1", w.with("slots", -1)),
		invalidReq("inFlight -1", w.with("inFlight", -1)),
		invalidReq("heartbeatMs -1", w.with("heartbeatMs", -1)),
		invalidReq("startedMs -1", w.with("startedMs", -1)),
		invalidReq("attempts holding '>'", w.with("attempts", []string{">"})),
		invalidReq("harnesses as an object", w.with("harnesses", obj{"id": "codex"})),
		invalidReq("harness without id", harness(obj{"pluginId": "codex"})),
		invalidReq("harness id 'a.b'", harness(obj{"id": "a.b"})),
		invalidReq("harness id reserved openclaw", harness(obj{"id": "openclaw"})),
		invalidReq("harness id reserved auto", harness(obj{"id": "auto"})),
		invalidReq("harness pluginId '*'", harness(obj{"id": "codex", "pluginId": "*"})),
		invalidReq("harness delegate id with a space", harness(obj{"id": "codex", "delegatedExecutionPluginIds": []string{"voice call"}})),
		invalidReq("harness injection v3", harness(obj{"id": "codex", "injection": "v3"})),
		invalidReq("harness fallbackRuntime codex", harness(obj{"id": "codex", "fallbackRuntime": "codex"})),
		invalidReq("harness authBootstrap gateway", harness(obj{"id": "codex", "authBootstrap": "gateway"})),
		invalidReq("harness priority 1.5", harness(obj{"id": "codex", "priority": 1.5})),
		invalidReq("slots as a string", w.with("slots", "4")),
	}
	for _, bad := range badIDs() {
		cases = append(cases, invalidReq("workerId "+bad.name, w.with("workerId", bad.id)))
	}
	// The manifest's message quotes the bad id; the error keeps a short,
	// valid UTF-8 prefix of it wherever the cut falls.
	for pad := range 2 {
		cases = append(cases, invalidReq(fmt.Sprintf("harness pluginId of 300 'é' after %d ASCII", pad),
			harness(obj{"id": "codex", "pluginId": strings.Repeat("p", pad) + strings.Repeat("é", 300)})))
	}
	runDecodeCases(t, decodeWorkerEntry, cases)
}

func TestWorkerEntryLive(t *testing.T) {
	for state, want := range map[string]bool{
		bus.WorkerStarting: false, bus.WorkerActive: true, bus.WorkerDraining: true, bus.WorkerStopped: false,
	} {
		if got := (&bus.WorkerEntry{State: state}).Live(); got != want {
			t.Errorf("Live() in state %s = %v, want %v", state, got, want)
		}
	}
}
