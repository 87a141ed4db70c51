package bus_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

// Benchmarks of the envelope codec on the path of one attempt: the router
// decodes the submit body and encodes the attempt it publishes; the worker
// decodes the attempt and encodes the claimed event, the result and the
// result event; the client decodes every event, and the result inside the
// last one. Each runs with the no-op turn's sizes ("echo") and with a 64 KiB
// prompt ("prompt64k").

var benchSizes = []struct {
	name   string
	prompt string
}{
	{"echo", "hello"},
	{"prompt64k", strings.Repeat("lorem ipsum dolor sit amet ", 64<<10/27)},
}

// benchAttempt is a prepared attempt as a gateway submits it (no id yet).
func benchAttempt(prompt string) *bus.Attempt {
	return &bus.Attempt{
		V: bus.Version, RunID: "run-1", AgentID: "main", SessionKey: "agent:main:telegram:direct:4242",
		SessionID: "sid-4242", StorePath: "/var/openclaw/agents/main/sessions.json",
		Provider: "openai", ModelID: "gpt-5.6-sol",
		ModelProvider: &selection.Route{RuntimePolicy: &selection.RuntimePolicy{CompatibleIDs: []string{"codex"}}, RequestTransportOverrides: "none"},
		Prompt:        prompt,
		Tools:         []bus.Tool{{Name: "read_file", Description: "Read a file", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}},
		ReplyTo:       "_INBOX.8fQpAxy1Cw7gS2LSmD2Qe1.4242",
		HostID:        "gw-1",
	}
}

// benchResult is a worker's ok result for the attempt.
func benchResult(prompt string) *bus.Result {
	return &bus.Result{
		V: bus.Version, AttemptID: "01M8NTV8NGD47D740B0PBXG15Q", Status: teamster.StatusOK, HarnessID: "codex",
		WorkerID: "w1", Fence: "550e4757df98ef8a:12", AssistantTexts: []string{prompt}, Usage: bus.Usage{OutputTokens: 12},
		NativeSession: json.RawMessage(`{"thread":"scripted-sid-4242","turns":12}`),
	}
}

func mustEncode(b testing.TB, v any) []byte {
	b.Helper()
	body, err := bus.Encode(v)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkDecodeSubmit is the router's first step: a submit body to a
// validated attempt with defaults.
func BenchmarkDecodeSubmit(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			body := mustEncode(b, benchAttempt(sz.prompt))
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := bus.DecodeSubmit(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeAttempt is the body the router publishes on
// teamster.attempt.<harnessId>.
func BenchmarkEncodeAttempt(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			a := benchAttempt(sz.prompt)
			a.AttemptID = "01M8NTV8NGD47D740B0PBXG15Q"
			a.ApplyDefaults()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bus.Encode(a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeAttempt is the worker's first step on a fetched message.
func BenchmarkDecodeAttempt(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			a := benchAttempt(sz.prompt)
			a.AttemptID = "01M8NTV8NGD47D740B0PBXG15Q"
			a.ApplyDefaults()
			body := mustEncode(b, a)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := bus.DecodeAttempt(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeClaimedEvent is the first event a worker sends: the data
// marshalled, then the event around it (AppendEvent into a reused buffer, as
// SendEvent does).
func BenchmarkEncodeClaimedEvent(b *testing.B) {
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		data, err := json.Marshal(bus.ClaimedData{WorkerID: "w1", HarnessID: "codex", Fence: "550e4757df98ef8a:12"})
		if err != nil {
			b.Fatal(err)
		}
		if buf, err = bus.AppendEvent(buf[:0], &bus.Event{V: bus.Version, AttemptID: "01M8NTV8NGD47D740B0PBXG15Q", Seq: 1, Type: bus.EventClaimed, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResult is the worker's result: the body recorded in Redis
// and published durably, then the result event around it (AppendEvent).
func BenchmarkEncodeResult(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			r := benchResult(sz.prompt)
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				body, err := bus.Encode(r)
				if err != nil {
					b.Fatal(err)
				}
				if buf, err = bus.AppendEvent(buf[:0], &bus.Event{V: bus.Version, AttemptID: r.AttemptID, Seq: 3, Type: bus.EventResult, Data: body}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeResultEvent is the client's last step: the event, then the
// result in its data.
func BenchmarkDecodeResultEvent(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			r := benchResult(sz.prompt)
			body := mustEncode(b, &bus.Event{V: bus.Version, AttemptID: r.AttemptID, Seq: 3, Type: bus.EventResult, Data: mustEncode(b, r)})
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var e bus.Event
				if err := bus.Decode(body, &e); err != nil {
					b.Fatal(err)
				}
				var res bus.Result
				if err := bus.Decode(e.Data, &res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
