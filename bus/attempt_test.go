package bus_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

// fullAttempt sets every field of a prepared attempt.
var fullAttempt = obj{
	"v": 1, "attemptId": "01JD5Z4N8B7ZK3Q2W8E6RDX1VA", "runId": "run-1", "agentId": "main",
	"sessionKey": "agent:main:main", "sessionId": "s-1", "storePath": "/var/lib/openclaw/agents/main/sessions.json",
	"provider": "openai", "modelId": "gpt-5",
	"modelProvider": obj{
		"runtimePolicy":             obj{"compatibleIds": []string{"codex"}},
		"requestTransportOverrides": "none",
		"preparedAuth":              obj{"source": "harness"},
	},
	"routes": []obj{
		{"runtimePolicy": obj{"compatibleIds": []string{"codex", "claude-cli"}}, "requestTransportOverrides": "present"},
		{},
	},
	"agentHarnessId": "codex", "agentHarnessRuntimeOverride": "codex", "modelSelectionLocked": true,
	"prompt": "hello <world> & co", "images": []obj{{"type": "image", "mimeType": "image/png", "data": "aGk="}},
	"tools":      []obj{{"name": "search", "description": "web search", "inputSchema": obj{"type": "object"}}, {"name": "noop"}},
	"toolsAllow": []string{"search"},
	"timeoutMs":  120000, "settlementTimeoutMs": 0, "queueTimeoutMs": 5000,
	"replyTo": "_INBOX.gw1.a1", "hostId": "gw-1", "captureRuntimeArtifact": true,
	"expectedRuntimeArtifact": obj{"id": "codex-cli", "fingerprint": "sha256:abc"},
	"authProfileRef":          "openai-default",
}

func wantFullAttempt() *bus.Attempt {
	return &bus.Attempt{
		V: 1, AttemptID: "01JD5Z4N8B7ZK3Q2W8E6RDX1VA", RunID: "run-1", AgentID: "main",
		SessionKey: "agent:main:main", SessionID: "s-1", StorePath: "/var/lib/openclaw/agents/main/sessions.json",
		Provider: "openai", ModelID: "gpt-5",
		ModelProvider: &selection.Route{
			RuntimePolicy:             &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}},
			RequestTransportOverrides: selection.OverridesNone,
			PreparedAuth:              &selection.PreparedAuth{Source: "harness"},
		},
		Routes: []selection.Route{
			{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex", "claude-cli"}}, RequestTransportOverrides: selection.OverridesPresent},
			{},
		},
		AgentHarnessID: "codex", AgentHarnessRuntimeOverride: "codex", ModelSelectionLocked: true,
		Prompt: "hello <world> & co",
		Images: []json.RawMessage{raw(`{"data":"aGk=","mimeType":"image/png","type":"image"}`)},
		Tools: []bus.Tool{
			{Name: "search", Description: "web search", InputSchema: raw(`{"type":"object"}`)},
			{Name: "noop"},
		},
		ToolsAllow: &[]string{"search"},
		TimeoutMs:  120000, SettlementTimeoutMs: ptr[int64](0), QueueTimeoutMs: 5000,
		ReplyTo: "_INBOX.gw1.a1", HostID: "gw-1", CaptureRuntimeArtifact: true,
		ExpectedRuntimeArtifact: &bus.RuntimeArtifact{ID: "codex-cli", Fingerprint: "sha256:abc"},
		AuthProfileRef:          "openai-default",
	}
}

// wantMinAttempt is minAttempt with its defaults applied.
func wantMinAttempt() *bus.Attempt {
	return &bus.Attempt{
		V: 1, SessionKey: "agent:main:main", SessionID: "s-1", AgentID: "main", Provider: "openai", ModelID: "gpt-5",
		TimeoutMs: 600_000, SettlementTimeoutMs: ptr[int64](30_000), QueueTimeoutMs: 600_000,
	}
}

// withTimeouts is wantMinAttempt with the given timeouts.
func withTimeouts(timeout, settlement, queue int64) *bus.Attempt {
	a := wantMinAttempt()
	a.TimeoutMs, a.SettlementTimeoutMs, a.QueueTimeoutMs = timeout, &settlement, queue
	return a
}

// attemptCases hold for an attempt however it is read: from a submit body
// or from the stream.
func attemptCases() []decodeCase {
	a := minAttempt
	cases := []decodeCase{
		validAs("minimal body gets the default timeouts", a, wantMinAttempt()),
		validAs("every field", fullAttempt, wantFullAttempt()),
		validAs("timeoutMs 0 reads as absent", a.with("timeoutMs", 0), withTimeouts(600_000, 30_000, 600_000)),
		validAs("queueTimeoutMs 0 reads as absent", a.with("queueTimeoutMs", 0), withTimeouts(600_000, 30_000, 600_000)),
		validAs("settlementTimeoutMs 0 is kept", a.with("settlementTimeoutMs", 0), withTimeouts(600_000, 0, 600_000)),
		validAs("settlementTimeoutMs null reads as absent", a.with("settlementTimeoutMs", nil), withTimeouts(600_000, 30_000, 600_000)),
		validAs("timeouts at their lower bounds", a.with("timeoutMs", 1, "settlementTimeoutMs", 0, "queueTimeoutMs", 1), withTimeouts(1, 0, 1)),
		validAs("timeouts at their upper bounds", a.with("timeoutMs", 86_400_000, "settlementTimeoutMs", 3_600_000, "queueTimeoutMs", 86_400_000),
			withTimeouts(86_400_000, 3_600_000, 86_400_000)),
		valid("attemptId of 64 characters", a.with("attemptId", idOfLen(64))),
		valid("attemptId of 1 character", a.with("attemptId", "a")),
		valid("attemptId starting with a digit, holding '-' and '_'", a.with("attemptId", "0a-B_9")),
		validAs("empty attemptId reads as absent", a.with("attemptId", ""), wantMinAttempt()),
		valid("harness ids of 64 characters", a.with("agentHarnessId", idOfLen(64), "agentHarnessRuntimeOverride", idOfLen(64), "hostId", idOfLen(64))),
		valid("non-ASCII session key", a.with("sessionKey", "agent:main:tëlégram:チャット")),
		valid("session key of 1024 bytes", a.with("sessionKey", strings.Repeat("k", 1024))),
		valid("sessionId of 256 bytes", a.with("sessionId", strings.Repeat("s", 256))),
		valid("prompt with newlines and tabs", a.with("prompt", "line 1\nline 2\t\x00end")),
		valid("prompt null", a.with("prompt", nil)),
		valid("toolsAllow empty restricts every tool", a.with("toolsAllow", []string{})),
		valid("toolsAllow null is no restriction", a.with("toolsAllow", nil)),
		valid("a settled-tool finalization, tool-less", a.without("tools").with("operation", "settled-tool-finalization", "toolsAllow", []string{})),
		invalidReq("an unknown operation", a.with("operation", "summarise")),
		invalidReq("a finalization with tools allowed", a.without("tools").with("operation", "settled-tool-finalization")),
		invalidReq("a finalization allowing a tool", a.without("tools").with("operation", "settled-tool-finalization", "toolsAllow", []string{"search"})),
		invalidReq("a finalization offered tools", a.with("operation", "settled-tool-finalization", "toolsAllow", []string{}, "tools", []obj{{"name": "t"}})),
		valid("tool inputSchema null", a.with("tools", []obj{{"name": "t", "inputSchema": nil}})),
		valid("images empty", a.with("images", []obj{})),
		valid("routes with no policy", a.with("routes", []obj{{}, {"requestTransportOverrides": "none"}})),
		valid("route with empty compatibleIds", a.with("modelProvider", obj{"runtimePolicy": obj{"compatibleIds": []string{}}})),
		valid("replyTo an inbox", a.with("replyTo", "_INBOX.Xy7Qz.42")),
		valid("modelSelectionLocked false", a.with("modelSelectionLocked", false)),

		// Required fields, each missing, empty or null.
		invalidReq("sessionKey missing", a.without("sessionKey")),
		invalidReq("sessionId missing", a.without("sessionId")),
		invalidReq("agentId missing", a.without("agentId")),
		invalidReq("provider missing", a.without("provider")),
		invalidReq("modelId missing", a.without("modelId")),
		invalidReq("sessionKey empty", a.with("sessionKey", "")),
		invalidReq("sessionId empty", a.with("sessionId", "")),
		invalidReq("agentId empty", a.with("agentId", "")),
		invalidReq("provider empty", a.with("provider", "")),
		invalidReq("modelId empty", a.with("modelId", "")),
		invalidReq("sessionKey null", a.with("sessionKey", nil)),
		invalidReq("modelId null", a.with("modelId", nil)),
		invalidReq("empty object", "{}"),
		invalidReq("only v", `{"v":1}`),

		// Wrong types.
		invalidReq("timeoutMs as a string", a.with("timeoutMs", "600000")),
		invalidReq("timeoutMs 1.5", a.with("timeoutMs", 1.5)),
		invalidReq("timeoutMs 1.0", a.with("timeoutMs", raw("1.0"))),
		invalidReq("timeoutMs beyond int64", a.with("timeoutMs", raw("9223372036854775808"))),
		invalidReq("timeoutMs as a boolean", a.with("timeoutMs", true)),
		invalidReq("settlementTimeoutMs as a string", a.with("settlementTimeoutMs", "0")),
		invalidReq("queueTimeoutMs as an object", a.with("queueTimeoutMs", obj{})),
		invalidReq("prompt as an object", a.with("prompt", obj{"text": "hi"})),
		invalidReq("prompt as a number", a.with("prompt", 1)),
		invalidReq("prompt as an array", a.with("prompt", []string{"hi"})),
		invalidReq("sessionKey as a number", a.with("sessionKey", 7)),
		invalidReq("agentId as an array", a.with("agentId", []string{"main"})),
		invalidReq("modelSelectionLocked as a string", a.with("modelSelectionLocked", "true")),
		invalidReq("captureRuntimeArtifact as a number", a.with("captureRuntimeArtifact", 1)),
		invalidReq("tools as an object", a.with("tools", obj{"name": "t"})),
		invalidReq("toolsAllow as a string", a.with("toolsAllow", "search")),
		invalidReq("toolsAllow holding a number", a.with("toolsAllow", []any{1})),
		invalidReq("images as a string", a.with("images", "aGk=")),
		invalidReq("modelProvider as a string", a.with("modelProvider", "openai")),
		invalidReq("routes as an object", a.with("routes", obj{})),
		invalidReq("compatibleIds as a string", a.with("modelProvider", obj{"runtimePolicy": obj{"compatibleIds": "codex"}})),
		invalidReq("expectedRuntimeArtifact as a string", a.with("expectedRuntimeArtifact", "codex-cli")),
		invalidReq("attemptId as a number", a.with("attemptId", 12)),

		// Numbers out of range.
		invalidReq("timeoutMs -1", a.with("timeoutMs", -1)),
		invalidReq("timeoutMs 86_400_001", a.with("timeoutMs", 86_400_001)),
		invalidReq("settlementTimeoutMs -1", a.with("settlementTimeoutMs", -1)),
		invalidReq("settlementTimeoutMs 3_600_001", a.with("settlementTimeoutMs", 3_600_001)),
		invalidReq("queueTimeoutMs -1", a.with("queueTimeoutMs", -1)),
		invalidReq("queueTimeoutMs 86_400_001", a.with("queueTimeoutMs", 86_400_001)),
		invalidReq("queueTimeoutMs most negative int64", a.with("queueTimeoutMs", raw("-9223372036854775808"))),

		// Limits and characters of strings.
		invalidReq("sessionKey of 1025 bytes", a.with("sessionKey", strings.Repeat("k", 1025))),
		invalidReq("sessionId of 257 bytes", a.with("sessionId", strings.Repeat("s", 257))),
		invalidReq("sessionId with a newline", a.with("sessionId", "s\n1")),
		invalidReq("sessionKey with NUL", a.with("sessionKey", "k\x00")),
		invalidReq("agentId with DEL", a.with("agentId", "main\x7f")),
		invalidReq("provider with a tab", a.with("provider", "open\tai")),
		invalidReq("storePath of 1025 bytes", a.with("storePath", strings.Repeat("/", 1025))),
		invalidReq("runId with a carriage return", a.with("runId", "r\r")),
		invalidReq("authProfileRef with an escape character", a.with("authProfileRef", "\x1b[31m")),
		invalidReq("expectedRuntimeArtifact without id", a.with("expectedRuntimeArtifact", obj{"fingerprint": "f"})),
		invalidReq("expectedRuntimeArtifact without fingerprint", a.with("expectedRuntimeArtifact", obj{"id": "i"})),
		invalidReq("expectedRuntimeArtifact empty", a.with("expectedRuntimeArtifact", obj{})),

		// Routes, tools and images.
		invalidReq("requestTransportOverrides not none or present", a.with("modelProvider", obj{"requestTransportOverrides": "maybe"})),
		invalidReq("requestTransportOverrides in capitals", a.with("modelProvider", obj{"requestTransportOverrides": "None"})),
		invalidReq("compatibleIds holding a wildcard", a.with("modelProvider", obj{"runtimePolicy": obj{"compatibleIds": []string{"codex", "*"}}})),
		invalidReq("compatibleIds holding an empty id", a.with("modelProvider", obj{"runtimePolicy": obj{"compatibleIds": []string{""}}})),
		invalidReq("second route invalid", a.with("routes", []obj{{}, {"runtimePolicy": obj{"compatibleIds": []string{"a.b"}}}})),
		invalidReq("preparedAuth source with a newline", a.with("modelProvider", obj{"preparedAuth": obj{"source": "a\nb"}})),
		invalidReq("image as a number", a.with("images", []any{1})),
		invalidReq("image as a string", a.with("images", []any{"aGk="})),
		invalidReq("image null", a.with("images", []any{nil})),
		invalidReq("image as an array", a.with("images", []any{[]any{}})),
		invalidReq("tool without name", a.with("tools", []obj{{"description": "d"}})),
		invalidReq("tool name with a newline", a.with("tools", []obj{{"name": "a\nb"}})),
		invalidReq("tool inputSchema as a string", a.with("tools", []obj{{"name": "t", "inputSchema": "object"}})),
		invalidReq("tool inputSchema as an array", a.with("tools", []obj{{"name": "t", "inputSchema": []any{}}})),
		invalidReq("tool inputSchema as a number", a.with("tools", []obj{{"name": "t", "inputSchema": 1}})),
		invalidReq("toolsAllow holding an empty name", a.with("toolsAllow", []string{"search", ""})),

		// replyTo.
		invalidReq("replyTo with an empty token", a.with("replyTo", "_INBOX..a")),
		invalidReq("replyTo ending in a dot", a.with("replyTo", "_INBOX.")),
		invalidReq("replyTo with '*'", a.with("replyTo", "_INBOX.*")),
		invalidReq("replyTo with '>'", a.with("replyTo", "_INBOX.>")),
		invalidReq("replyTo with a space", a.with("replyTo", "_INBOX.a b")),
		invalidReq("replyTo non-ASCII", a.with("replyTo", "_INBOX.é")),
		invalidReq("replyTo of 513 bytes", a.with("replyTo", strings.Repeat("r", 513))),
	}
	// The identifier rule, for every identifier field of an attempt.
	for _, field := range []string{"attemptId", "agentHarnessId", "agentHarnessRuntimeOverride", "hostId"} {
		for _, bad := range badIDs() {
			if bad.id == "" {
				continue // an empty optional id reads as absent
			}
			cases = append(cases, invalidReq(field+" "+bad.name, a.with(field, bad.id)))
		}
	}
	return cases
}

// badID is a string the identifier rule refuses.
type badID struct{ name, id string }

func badIDs() []badID {
	return []badID{
		{"empty", ""},
		{"with '.'", "a.b"},
		{"'*'", "*"},
		{"'>'", ">"},
		{"with a space", "has space"},
		{"with a tab", "a\tb"},
		{"with a newline", "a\n"},
		{"of 65 characters", idOfLen(65)},
		{"starting with '-'", "-a"},
		{"starting with '_'", "_a"},
		{"with '/'", "a/b"},
		{"with ':'", "a:b"},
		{"non-ASCII", "é"},
		{"with NUL", "a\x00"},
	}
}

func TestDecodeSubmit(t *testing.T) {
	cases := attemptCases()
	for _, v := range []any{"voice-call", nil, obj{}, obj{"pluginId": "voice-call"}, false, true, "", 0, []any{}} {
		b, _ := json.Marshal(v)
		cases = append(cases, invalidReq("delegate "+string(b), minAttempt.with("delegate", v)))
	}
	cases = append(cases,
		invalidReq("delegate key in other case", minAttempt.with("Delegate", "voice-call")),
		invalidReq("delegate on an otherwise invalid body", minAttempt.without("sessionKey").with("delegate", "x")),
	)
	runDecodeCases(t, decodeSubmit, cases)
}

func TestDecodeAttempt(t *testing.T) {
	cases := append(attemptCases(),
		// The stream carries what the router wrote; delegate is just an
		// unknown field there, the submit subject is where it is refused.
		validAs("delegate is an unknown field on the stream", minAttempt.with("delegate", "voice-call"), wantMinAttempt()),
	)
	runDecodeCases(t, decodeAttempt, cases)
}

func TestAttemptApplyDefaults(t *testing.T) {
	t.Run("fills only what is absent", func(t *testing.T) {
		a := &bus.Attempt{TimeoutMs: 5, SettlementTimeoutMs: ptr[int64](0)}
		a.ApplyDefaults()
		want := &bus.Attempt{TimeoutMs: 5, SettlementTimeoutMs: ptr[int64](0), QueueTimeoutMs: bus.DefaultQueueTimeoutMs}
		if diff := cmp.Diff(want, a); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("durations", func(t *testing.T) {
		a := withTimeouts(1500, 250, 90_000)
		if got := a.Timeout(); got != 1500*time.Millisecond {
			t.Errorf("Timeout() = %v", got)
		}
		if got := a.SettlementTimeout(); got != 250*time.Millisecond {
			t.Errorf("SettlementTimeout() = %v", got)
		}
		if got := a.QueueTimeout(); got != 90*time.Second {
			t.Errorf("QueueTimeout() = %v", got)
		}
		if got := (&bus.Attempt{}).SettlementTimeout(); got != 30*time.Second {
			t.Errorf("SettlementTimeout() without a value = %v, want the default 30s", got)
		}
	})
}

func TestAttemptSelectionRoutes(t *testing.T) {
	one := selection.Route{RequestTransportOverrides: selection.OverridesNone}
	two := selection.Route{RequestTransportOverrides: selection.OverridesPresent}
	for _, tc := range []struct {
		name string
		a    bus.Attempt
		want []selection.Route
	}{
		{"none prepared", bus.Attempt{}, nil},
		{"modelProvider alone", bus.Attempt{ModelProvider: &one}, []selection.Route{one}},
		{"routes win over modelProvider", bus.Attempt{ModelProvider: &one, Routes: []selection.Route{two, one}}, []selection.Route{two, one}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.a.SelectionRoutes()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeSubmitReply(t *testing.T) {
	r := minSubmitReply
	record := obj{
		"provider": "openai", "modelId": "gpt-5", "sessionKey": "agent:main:main", "agentId": "main",
		"runtime": "codex", "runtimeSource": "pin", "selectedHarnessId": "codex", "selectedReason": "forced_plugin",
		"candidates": []obj{{"id": "codex", "pluginId": "codex", "supported": true, "priority": 100}},
	}
	runDecodeCases(t, decodeSubmitReply, []decodeCase{
		validAs("accepted with selection", r.with("selection", record), &bus.SubmitReply{
			V: 1, Status: "accepted", AttemptID: "a1", HarnessID: "codex",
			Selection: &selection.Record{
				Provider: "openai", ModelID: "gpt-5", SessionKey: "agent:main:main", AgentID: "main",
				Runtime: "codex", RuntimeSource: "pin", SelectedHarnessID: "codex", SelectedReason: "forced_plugin",
				Candidates: []selection.Candidate{{ID: "codex", PluginID: "codex", Supported: true, Priority: 100}},
			},
		}),
		valid("accepted without harnessId", r.without("harnessId")),
		valid("fallback", r.with("status", "fallback", "harnessId", "openclaw")),
		validAs("rejected with error and no attemptId", obj{"v": 1, "status": "rejected", "error": obj{"code": "harness_not_registered", "message": "no worker hosts codex"}},
			&bus.SubmitReply{V: 1, Status: "rejected", Error: &teamster.Error{Code: teamster.CodeHarnessNotRegistered, Message: "no worker hosts codex"}}),
		valid("rejected with attemptId", r.with("status", "rejected", "error", obj{"code": "delegation_denied"})),

		invalidReq("status missing", r.without("status")),
		invalidReq("status ok", r.with("status", "ok")),
		invalidReq("status as a number", r.with("status", 0)),
		invalidReq("rejected without error", r.with("status", "rejected")),
		invalidReq("accepted with error", r.with("error", obj{"code": "internal"})),
		invalidReq("fallback with error", r.with("status", "fallback", "error", obj{"code": "internal"})),
		invalidReq("accepted without attemptId", r.without("attemptId")),
		invalidReq("accepted with attemptId 'a.b'", r.with("attemptId", "a.b")),
		invalidReq("accepted with attemptId of 65 characters", r.with("attemptId", idOfLen(65))),
		invalidReq("harnessId with a space", r.with("harnessId", "has space")),
		invalidReq("harnessId '>'", r.with("harnessId", ">")),
		invalidReq("error with unknown code", obj{"v": 1, "status": "rejected", "error": obj{"code": "nope"}}),
		invalidReq("error with bad sideEffects", obj{"v": 1, "status": "rejected", "error": obj{"code": "internal", "sideEffects": "some"}}),
		invalidReq("selection as a string", r.with("selection", "codex")),
		invalidReq("selection candidates as an object", r.with("selection", obj{"candidates": obj{}})),
	})
}

// The digest an attempt id is bound to covers the normalised attempt and the
// delegate, not replyTo: a resubmit from a new inbox is the same attempt, a
// different prompt, pin or delegate is not, and defaults spelled out are the
// defaults.
func TestAttemptDigest(t *testing.T) {
	decode := func(body obj) *bus.Attempt {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		a, err := bus.DecodeSubmit(b)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	with := func(k string, v any) obj {
		o := obj{}
		for kk, vv := range fullAttempt {
			o[kk] = vv
		}
		if v == nil {
			delete(o, k)
		} else {
			o[k] = v
		}
		return o
	}
	digest := func(a *bus.Attempt, delegate string) string {
		t.Helper()
		d, err := bus.AttemptDigest(a, delegate)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := digest(decode(fullAttempt), "")
	if len(base) != 64 {
		t.Fatalf("digest %q, want 64 hex characters", base)
	}
	same := map[string]*bus.Attempt{
		"another replyTo": decode(with("replyTo", "_INBOX.gw2.z9")),
		"no replyTo":      decode(with("replyTo", nil)),
	}
	for name, a := range same {
		if got := digest(a, ""); got != base {
			t.Errorf("%s: digest changed", name)
		}
	}
	minimal := obj{"v": 1, "sessionKey": "s", "sessionId": "i", "agentId": "main", "provider": "openai", "modelId": "m", "prompt": "p"}
	spelled := obj{}
	for k, v := range minimal {
		spelled[k] = v
	}
	spelled["timeoutMs"], spelled["queueTimeoutMs"], spelled["settlementTimeoutMs"] = 600000, 600000, 30000
	if digest(decode(minimal), "") != digest(decode(spelled), "") {
		t.Error("defaults spelled out changed the digest")
	}
	different := map[string]string{
		"prompt":   digest(decode(with("prompt", "changed")), ""),
		"pin":      digest(decode(with("agentHarnessId", "claude-cli")), ""),
		"attempt":  digest(decode(with("attemptId", "other-id")), ""),
		"delegate": digest(decode(fullAttempt), "voice-call"),
	}
	for name, d := range different {
		if d == base {
			t.Errorf("another %s: same digest", name)
		}
	}
}
