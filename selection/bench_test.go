package selection

import "testing"

// BenchmarkSelect measures one selection against the six-harness fleet under
// a realistic policy, per mode.
func BenchmarkSelect(b *testing.B) {
	p, err := ParsePolicy("policy.json", []byte(exampleFull))
	if err != nil {
		b.Fatal(err)
	}
	benches := []struct {
		name  string
		facts Facts
	}{
		{"auto", Facts{Provider: "mistral", ModelID: "large", AgentID: "main", Routes: []Route{compat("gemini-cli")}}},
		{"provider", Facts{Provider: "openai", ModelID: "gpt-5.6-sol", AgentID: "main", Routes: []Route{allRoute}}},
		{"agent-wildcard", Facts{Provider: "openai", ModelID: "gpt-5.6-sol", AgentID: "reviewer", Routes: []Route{allRoute}}},
		{"pin", Facts{Provider: "openai", ModelID: "gpt-5.6-sol", AgentHarnessID: "codex", Routes: []Route{allRoute}}},
		{"routes-3", Facts{Provider: "mistral", ModelID: "large", Routes: []Route{allRoute, compat("gemini-cli", "relay"), present("relay")}}},
		{"unsupported", Facts{Provider: "openai", ModelID: "gpt-5.6-sol", AgentHarnessID: "codex", Routes: []Route{undeclared()}}},
	}
	for _, bc := range benches {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Select(p, bc.facts, fleet); err != nil && bc.name != "unsupported" {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParsePolicy measures reading a realistic config.
func BenchmarkParsePolicy(b *testing.B) {
	data := []byte(exampleFull)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ParsePolicy("policy.json", data); err != nil {
			b.Fatal(err)
		}
	}
}
