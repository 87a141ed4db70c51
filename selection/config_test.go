package selection

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The first four configs are the JSON examples of OpenClaw's "runtime
// strictness" section, pretty-printed.
const (
	exampleCodexOnly = `{
  "models": {
    "providers": {
      "openai": {
        "agentRuntime": {
          "id": "codex"
        }
      }
    }
  },
  "agents": {
    "defaults": {
      "model": "openai/gpt-5.6-sol"
    }
  }
}`
	exampleClaudeModel = `{
  "agents": {
    "defaults": {
      "model": "anthropic/claude-opus-5",
      "models": {
        "anthropic/claude-opus-5": {
          "agentRuntime": {
            "id": "claude-cli"
          }
        }
      }
    }
  }
}`
	examplePerAgent = `{
  "agents": {
    "list": [
      {
        "id": "codex-only",
        "model": "openai/gpt-5.6-sol",
        "models": {
          "openai/gpt-5.6-sol": {
            "agentRuntime": { "id": "codex" }
          }
        }
      }
    ]
  }
}`
	exampleLegacy = `{
  "agents": {
    "defaults": {
      "agentRuntime": {
        "id": "codex"
      }
    }
  }
}`
	// exampleFull is a larger config in OpenClaw's shape with many keys
	// selection does not read.
	exampleFull = `{
  "gateway": { "port": 18789, "auth": { "mode": "token" } },
  "channels": { "telegram": { "enabled": true, "allowFrom": ["+3161234"] } },
  "plugins": { "allow": ["codex"], "entries": { "codex": { "enabled": true } } },
  "models": {
    "mode": "merge",
    "providers": {
      "openai": {
        "baseUrl": "https://api.openai.com/v1",
        "api": "openai-responses",
        "agentRuntime": { "id": "codex", "fallback": "none" },
        "models": [
          { "id": "gpt-5.6-sol", "name": "GPT 5.6", "contextWindow": 400000, "reasoning": true },
          { "id": "gpt-4.1-mini", "cost": { "input": 0.4, "output": 1.6 }, "agentRuntime": { "id": "openclaw" } },
          { "id": "gpt-oss", "agentRuntime": null }
        ]
      },
      "ollama": { "baseUrl": "http://127.0.0.1:11434", "models": [] }
    }
  },
  "agents": {
    "defaults": {
      "workspace": "~/work",
      "model": { "primary": "openai/gpt-5.6-sol", "fallbacks": ["anthropic/claude-opus-5"] },
      "models": {
        "anthropic/claude-opus-5": { "alias": "opus", "params": { "temperature": 0.2 } },
        "anthropic/*": { "agentRuntime": { "id": "claude-cli" } },
        "openai/gpt-5.6-sol": { "agentRuntime": { "id": "default" } }
      },
      "heartbeat": { "every": "30m" }
    },
    "list": [
      { "id": "main", "default": true },
      {
        "id": "reviewer",
        "tools": { "allow": ["read"] },
        "models": {
          "anthropic/claude-opus-5": { "agentRuntime": { "id": "auto" } },
          "openai/*": { "agentRuntime": { "id": "relay" } }
        }
      }
    ]
  },
  "session": { "dmScope": "per-peer" }
}`
)

func TestParsePolicyGood(t *testing.T) {
	openai := Facts{Provider: "openai", ModelID: "gpt-5.6-sol", AgentID: "main"}
	tests := []struct {
		rule   string
		config string
		facts  Facts
		want   Resolution
	}{
		{
			rule: "config: a provider-level runtime (OpenClaw's Codex-only example)", config: exampleCodexOnly, facts: openai,
			want: Resolution{Runtime: "codex", Source: SourceProvider, Origin: "policy.json:6: models.providers.openai.agentRuntime.id"},
		},
		{
			rule: "config: a defaults model entry (OpenClaw's CLI backend example)", config: exampleClaudeModel,
			facts: Facts{Provider: "anthropic", ModelID: "claude-opus-5", AgentID: "main"},
			want: Resolution{Runtime: "claude-cli", Source: SourceModel,
				Origin: `policy.json:8: agents.defaults.models["anthropic/claude-opus-5"].agentRuntime.id`},
		},
		{
			rule: "config: the defaults model entry does not apply to another model", config: exampleClaudeModel,
			facts: Facts{Provider: "anthropic", ModelID: "claude-sonnet-5"},
			want:  Resolution{Runtime: RuntimeAuto, Source: SourceAuto},
		},
		{
			rule: "config: a per-agent model entry (OpenClaw's per-agent example)", config: examplePerAgent,
			facts: Facts{Provider: "openai", ModelID: "gpt-5.6-sol", AgentID: "codex-only"},
			want: Resolution{Runtime: "codex", Source: SourceModel,
				Origin: `policy.json:9: agents.list[0].models["openai/gpt-5.6-sol"].agentRuntime.id`},
		},
		{
			rule: "config: a per-agent entry does not apply to other agents", config: examplePerAgent, facts: openai,
			want: Resolution{Runtime: RuntimeAuto, Source: SourceAuto},
		},
		{
			rule: "config: the legacy whole-agent runtime is ignored with a note", config: exampleLegacy, facts: openai,
			want: Resolution{Runtime: RuntimeAuto, Source: SourceAuto, Notes: []string{
				"policy.json:4: agents.defaults.agentRuntime is a legacy whole-agent runtime and is ignored; " +
					`set agentRuntime.id per model (agents.defaults.models["<provider>/<model>"]) ` +
					"or per provider (models.providers.<provider>)"}},
		},
		{
			rule: "config: default in a defaults entry defers to the provider", config: exampleFull, facts: openai,
			want: Resolution{Runtime: "codex", Source: SourceProvider, Origin: "policy.json:11: models.providers.openai.agentRuntime.id"},
		},
		{
			rule: "config: a provider model row sets openclaw", config: exampleFull,
			facts: Facts{Provider: "openai", ModelID: "gpt-4.1-mini", AgentID: "main"},
			want: Resolution{Runtime: RuntimeOpenClaw, Source: SourceModel,
				Origin: "policy.json:14: models.providers.openai.models[1].agentRuntime.id"},
		},
		{
			rule: "config: a null agentRuntime is absent", config: exampleFull,
			facts: Facts{Provider: "openai", ModelID: "gpt-oss", AgentID: "main"},
			want:  Resolution{Runtime: "codex", Source: SourceProvider, Origin: "policy.json:11: models.providers.openai.agentRuntime.id"},
		},
		{
			rule: "config: the defaults wildcard applies to any model of the provider", config: exampleFull,
			facts: Facts{Provider: "anthropic", ModelID: "claude-haiku-5", AgentID: "main"},
			want: Resolution{Runtime: "claude-cli", Source: SourceModel,
				Origin: `policy.json:27: agents.defaults.models["anthropic/*"].agentRuntime.id`},
		},
		{
			rule: "config: an agent's explicit auto beats the defaults wildcard", config: exampleFull,
			facts: Facts{Provider: "anthropic", ModelID: "claude-opus-5", AgentID: "reviewer"},
			want: Resolution{Runtime: RuntimeAuto, Source: SourceModel,
				Origin: `policy.json:38: agents.list[1].models["anthropic/claude-opus-5"].agentRuntime.id`},
		},
		{
			rule: "config: a provider model row beats an agent wildcard", config: exampleFull,
			facts: Facts{Provider: "openai", ModelID: "gpt-4.1-mini", AgentID: "reviewer"},
			want: Resolution{Runtime: RuntimeOpenClaw, Source: SourceModel,
				Origin: "policy.json:14: models.providers.openai.models[1].agentRuntime.id"},
		},
		{
			rule: "config: an agent wildcard beats the provider runtime", config: exampleFull,
			facts: Facts{Provider: "openai", ModelID: "gpt-5.6-sol", AgentID: "reviewer"},
			want: Resolution{Runtime: "relay", Source: SourceModel,
				Origin: `policy.json:39: agents.list[1].models["openai/*"].agentRuntime.id`},
		},
		{
			rule: "config: an empty file is everything auto", config: "", facts: openai,
			want: Resolution{Runtime: RuntimeAuto, Source: SourceAuto},
		},
		{
			rule: "config: whitespace only is everything auto", config: " \n\t\n", facts: openai,
			want: Resolution{Runtime: RuntimeAuto, Source: SourceAuto},
		},
		{
			rule: "config: an empty object is everything auto", config: "{}", facts: openai,
			want: Resolution{Runtime: RuntimeAuto, Source: SourceAuto},
		},
		{
			rule: "config: a top-level null is everything auto", config: "null", facts: openai,
			want: Resolution{Runtime: RuntimeAuto, Source: SourceAuto},
		},
		{
			rule: "config: a byte order mark is accepted", config: "\xef\xbb\xbf" + exampleCodexOnly, facts: openai,
			want: Resolution{Runtime: "codex", Source: SourceProvider, Origin: "policy.json:6: models.providers.openai.agentRuntime.id"},
		},
		{
			rule:   "config: null sections are absent",
			config: `{"models": null, "agents": {"defaults": null, "list": null}}`, facts: openai,
			want: Resolution{Runtime: RuntimeAuto, Source: SourceAuto},
		},
		{
			rule:   "config: a repeated key keeps the last value, as JSON.parse does",
			config: `{"models":{"providers":{"openai":{"agentRuntime":{"id":"codex"}},"openai":{"agentRuntime":{"id":"relay"}}}}}`,
			facts:  openai,
			want:   Resolution{Runtime: "relay", Source: SourceProvider, Origin: "policy.json:1: models.providers.openai.agentRuntime.id"},
		},
		{
			rule: "config: a session pin beats every configured level", config: exampleFull,
			facts: Facts{Provider: "openai", ModelID: "gpt-4.1-mini", AgentID: "reviewer", AgentHarnessRuntimeOverride: "codex"},
			want:  Resolution{Runtime: "codex", Source: SourcePin, Origin: "session agentHarnessRuntimeOverride"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			p, err := ParsePolicy("policy.json", []byte(tc.config))
			if err != nil {
				t.Fatalf("rule %q: ParsePolicy: %v", tc.rule, err)
			}
			if diff := cmp.Diff(tc.want, p.Resolve(tc.facts)); diff != "" {
				t.Errorf("rule %q: Resolve mismatch (-want +got):\n%s", tc.rule, diff)
			}
		})
	}
}

func TestParsePolicyBad(t *testing.T) {
	tests := []struct {
		rule   string
		config string
		want   ConfigError // Msg is matched as a substring
	}{
		{
			rule: "config error: a wrong-typed runtime id names file, line and key",
			config: `{
  "agents": {
    "defaults": {
      "model": "openai/gpt-5.6-sol"
    }
  },
  "models": {
    "providers": {
      "openai": {
        "baseUrl": "https://api.openai.com/v1",
        "agentRuntime": {
          "id": 7
        }
      }
    }
  }
}`,
			want: ConfigError{Line: 12, Path: "models.providers.openai.agentRuntime.id", Msg: "want a string, got number"},
		},
		{
			rule:   "config error: a syntax error names its line",
			config: "{\n  \"models\": {\n    \"providers\": {}\n    \"x\": 1\n  }\n}",
			want:   ConfigError{Line: 4, Msg: "invalid JSON: invalid character '\"' after object key:value pair"},
		},
		{
			rule:   "config error: truncated input is reported at its end",
			config: "{\n  \"models\": {\n",
			want:   ConfigError{Line: 2, Msg: "invalid JSON: unexpected end of JSON input"},
		},
		{
			rule:   "config error: JSON5 trailing commas are not accepted",
			config: "{\n  \"agents\": {\"list\": [],},\n}",
			want:   ConfigError{Line: 2, Msg: "invalid JSON"},
		},
		{
			rule:   "config error: data after the top-level value",
			config: "{}\n{}",
			want:   ConfigError{Line: 2, Msg: "invalid JSON: invalid character '{' after top-level value"},
		},
		{
			rule:   "config error: the top level must be an object",
			config: `["models"]`,
			want:   ConfigError{Line: 1, Msg: "want an object, got array"},
		},
		{
			rule:   "config error: agentRuntime given as a string",
			config: "{\"models\": {\"providers\": {\"openai\": {\n\"agentRuntime\": \"codex\"}}}}",
			want:   ConfigError{Line: 2, Path: "models.providers.openai.agentRuntime", Msg: "want an object, got string"},
		},
		{
			rule:   "config error: a provider's models must be an array",
			config: `{"models": {"providers": {"openai": {"models": {"gpt-5": {}}}}}}`,
			want:   ConfigError{Line: 1, Path: "models.providers.openai.models", Msg: "want an array, got object"},
		},
		{
			rule:   "config error: an invalid runtime id",
			config: "{\"agents\": {\"list\": [{\"id\": \"main\", \"models\": {\n\"openai/gpt-5\": {\"agentRuntime\": {\"id\": \"co dex\"}}}}]}}",
			want: ConfigError{Line: 2, Path: `agents.list[0].models["openai/gpt-5"].agentRuntime.id`,
				Msg: `"co dex" is not a valid runtime id (want ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$)`},
		},
		{
			rule:   "config error: a runtime id longer than 64 characters",
			config: `{"models": {"providers": {"openai": {"agentRuntime": {"id": "` + strings.Repeat("x", 65) + `"}}}}}`,
			want:   ConfigError{Line: 1, Path: "models.providers.openai.agentRuntime.id", Msg: "is not a valid runtime id"},
		},
		{
			rule:   "config error: an empty runtime id",
			config: `{"agents": {"defaults": {"models": {"openai/*": {"agentRuntime": {"id": ""}}}}}}`,
			want:   ConfigError{Line: 1, Path: `agents.defaults.models["openai/*"].agentRuntime.id`, Msg: `"" is not a valid runtime id`},
		},
		{
			rule:   "config error: agents.list must be an array",
			config: `{"agents": {"list": {"main": {}}}}`,
			want:   ConfigError{Line: 1, Path: "agents.list", Msg: "want an array, got object"},
		},
		{
			rule:   "config error: an agent entry without id",
			config: "{\"agents\": {\"list\": [\n{\"id\": \"main\"},\n{\"model\": \"openai/gpt-5\"}]}}",
			want:   ConfigError{Line: 3, Path: "agents.list[1]", Msg: "agent entry has no id"},
		},
		{
			rule:   "config error: an agent id of the wrong type",
			config: `{"agents": {"list": [{"id": 3}]}}`,
			want:   ConfigError{Line: 1, Path: "agents.list[0].id", Msg: "want a string, got number"},
		},
		{
			rule:   "config error: an agent listed twice",
			config: "{\"agents\": {\"list\": [\n{\"id\": \"main\"},\n{\"id\": \"Main\"}]}}",
			want:   ConfigError{Line: 3, Path: "agents.list[1].id", Msg: `agent id "Main" is listed twice (first at line 2)`},
		},
		{
			rule:   "config error: a provider model listed twice",
			config: "{\"models\": {\"providers\": {\"openai\": {\"models\": [\n{\"id\": \"gpt-5\"},\n{\"id\": \"gpt-5\", \"agentRuntime\": {\"id\": \"codex\"}}]}}}}",
			want:   ConfigError{Line: 3, Path: "models.providers.openai.models[1].id", Msg: `model id "gpt-5" is listed twice (first at line 2)`},
		},
		{
			rule:   "config error: a provider model row without id",
			config: `{"models": {"providers": {"openai": {"models": [{"agentRuntime": {"id": "codex"}}]}}}}`,
			want:   ConfigError{Line: 1, Path: "models.providers.openai.models[0]", Msg: "model entry has no id"},
		},
		{
			rule:   "config error: a null provider model row",
			config: `{"models": {"providers": {"openai": {"models": [null]}}}}`,
			want:   ConfigError{Line: 1, Path: "models.providers.openai.models[0]", Msg: "want an object, got null"},
		},
		{
			rule:   "config error: a model-prefix glob is not a wildcard",
			config: "{\"agents\": {\"defaults\": {\"models\": {\n\"openai/gpt-*\": {\"agentRuntime\": {\"id\": \"codex\"}}}}}}",
			want:   ConfigError{Line: 2, Path: `agents.defaults.models["openai/gpt-*"]`, Msg: `must be "<provider>/<model>" or "<provider>/*"`},
		},
		{
			rule:   "config error: a model key without provider that sets a runtime",
			config: `{"agents": {"defaults": {"models": {"gpt-5": {"agentRuntime": {"id": "codex"}}}}}}`,
			want:   ConfigError{Line: 1, Path: "agents.defaults.models.gpt-5", Msg: `must be "<provider>/<model>"`},
		},
		{
			rule:   "config error: agents.defaults.models must be an object",
			config: `{"agents": {"defaults": {"models": ["openai/gpt-5"]}}}`,
			want:   ConfigError{Line: 1, Path: "agents.defaults.models", Msg: "want an object, got array"},
		},
		{
			rule:   "config error: models.providers must be an object",
			config: `{"models": {"providers": true}}`,
			want:   ConfigError{Line: 1, Path: "models.providers", Msg: "want an object, got boolean"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			p, err := ParsePolicy("policy.json", []byte(tc.config))
			if err == nil {
				t.Fatalf("rule %q: ParsePolicy succeeded with %+v, want an error", tc.rule, p)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("rule %q: error %v is %T, want *ConfigError", tc.rule, err, err)
			}
			got := ConfigError{File: ce.File, Line: ce.Line, Path: ce.Path, Msg: tc.want.Msg}
			want := tc.want
			want.File = "policy.json"
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rule %q: error %q: (-want +got):\n%s", tc.rule, err, diff)
			}
			if !strings.Contains(ce.Msg, tc.want.Msg) {
				t.Errorf("rule %q: message %q does not contain %q", tc.rule, ce.Msg, tc.want.Msg)
			}
			prefix := "policy.json:" + strconv.Itoa(tc.want.Line) + ": "
			if tc.want.Path != "" {
				prefix += tc.want.Path + ": "
			}
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("rule %q: error %q does not start with %q", tc.rule, err, prefix)
			}
		})
	}
}

func TestParsePolicyErrorText(t *testing.T) {
	config := "{\"models\": {\"providers\": {\"openai\": {\"agentRuntime\": {\n\"id\": 12}}}}}"
	_, err := ParsePolicy("/etc/teamster/policy.json", []byte(config))
	want := "/etc/teamster/policy.json:2: models.providers.openai.agentRuntime.id: want a string, got number"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}

func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "runtime.json")
	if err := os.WriteFile(good, []byte(exampleCodexOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n\"agents\": []\n}"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	openai := Facts{Provider: "openai", ModelID: "gpt-5.6-sol"}

	t.Run("config: a file is loaded under its path", func(t *testing.T) {
		p, err := LoadPolicy(good)
		if err != nil {
			t.Fatal(err)
		}
		want := Resolution{Runtime: "codex", Source: SourceProvider, Origin: good + ":6: models.providers.openai.agentRuntime.id"}
		if diff := cmp.Diff(want, p.Resolve(openai)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("config: an empty path is no policy", func(t *testing.T) {
		p, err := LoadPolicy("")
		if err != nil || p.Resolve(openai).Runtime != RuntimeAuto {
			t.Fatalf("LoadPolicy(\"\") = %v, %v; want an all-auto policy", p, err)
		}
	})
	t.Run("config: an empty file is an all-auto policy", func(t *testing.T) {
		p, err := LoadPolicy(empty)
		if err != nil || p.Resolve(openai).Runtime != RuntimeAuto {
			t.Fatalf("LoadPolicy(empty) = %v, %v; want an all-auto policy", p, err)
		}
	})
	t.Run("config error: a missing file is an error", func(t *testing.T) {
		_, err := LoadPolicy(filepath.Join(dir, "missing.json"))
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.json") {
			t.Fatalf("error = %v, want a not-exist error naming the file", err)
		}
	})
	t.Run("config error: a bad file names its path and line", func(t *testing.T) {
		_, err := LoadPolicy(bad)
		want := bad + ":2: agents: want an object, got array"
		if err == nil || err.Error() != want {
			t.Fatalf("error = %v, want %q", err, want)
		}
	})
}

func TestNilPolicyResolvesAuto(t *testing.T) {
	var p *Policy
	got := p.Resolve(Facts{Provider: "openai", ModelID: "gpt-5.6-sol"})
	if diff := cmp.Diff(Resolution{Runtime: RuntimeAuto, Source: SourceAuto}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The digest follows what the policy decides, not how its file is written.
func TestPolicyDigest(t *testing.T) {
	a := mustPolicy(t, `{"models":{"providers":{"openai":{"agentRuntime":{"id":"codex"}}}}}`)
	b := mustPolicy(t, "{\n  \"models\": {\"providers\": {\"openai\": {\"agentRuntime\": {\"id\": \"codex\"}}}},\n  \"unrelated\": 1\n}")
	c := mustPolicy(t, `{"models":{"providers":{"openai":{"agentRuntime":{"id":"claude-cli"}}}}}`)
	d := mustPolicy(t, `{"agents":{"defaults":{"models":{"openai/gpt-5":{"agentRuntime":{"id":"codex"}}}}}}`)
	var none *Policy
	if a.Digest() != b.Digest() {
		t.Errorf("same decisions, different digests: %s, %s", a.Digest(), b.Digest())
	}
	seen := map[string]string{}
	for name, p := range map[string]*Policy{"a": a, "c": c, "d": d, "nil": none} {
		dg := p.Digest()
		if len(dg) != 12 {
			t.Errorf("%s: digest %q is not 12 hex digits", name, dg)
		}
		if other, ok := seen[dg]; ok {
			t.Errorf("policies %s and %s share digest %s", name, other, dg)
		}
		seen[dg] = name
	}
}
