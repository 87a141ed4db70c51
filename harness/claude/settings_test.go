package claude

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestParseSettings(t *testing.T) {
	for _, tc := range []struct {
		name, raw, wantErr string
		check              func(t *testing.T, s settings)
	}{
		{name: "absent", raw: ``, check: func(t *testing.T, s settings) {
			if s.MinVersion != PinnedVersion || s.APIKeyEnv != "ANTHROPIC_API_KEY" || s.PermissionMode != "dontAsk" || !strings.HasSuffix(s.Binary, localBinary) {
				t.Fatalf("defaults %+v", s)
			}
		}},
		{name: "null", raw: `null`},
		{name: "empty", raw: `{}`},
		{name: "full", raw: `{"binary":"/opt/claude","home":"/var/lib/claude","cwd":"/srv/work","baseUrl":"https://api.example.test",
			"apiKeyEnv":"CLAUDE_KEY","authProfiles":{"team-a":{"apiKeyEnv":"TEAM_A_KEY","baseUrl":"http://127.0.0.1:9"}},
			"env":{"MCP_TOOL_TIMEOUT":"60000"},"minVersion":"2.1.0","model":"claude-x","builtinTools":["Read","Grep"],
			"permissionMode":"bypassPermissions","maxTurns":8}`, check: func(t *testing.T, s settings) {
			if s.Binary != "/opt/claude" || s.AuthProfiles["team-a"].APIKeyEnv != "TEAM_A_KEY" || !slices.Equal(s.BuiltinTools, []string{"Read", "Grep"}) || s.MaxTurns != 8 {
				t.Fatalf("settings %+v", s)
			}
		}},
		{name: "unknown key", raw: `{"bogus":1}`, wantErr: "unknown field"},
		{name: "bad minVersion", raw: `{"minVersion":"two"}`, wantErr: "minVersion"},
		{name: "relative home", raw: `{"home":"rel"}`, wantErr: "home \"rel\" is not an absolute path"},
		{name: "relative cwd", raw: `{"cwd":"rel"}`, wantErr: "cwd"},
		{name: "env sets the key", raw: `{"env":{"ANTHROPIC_API_KEY":"sk-x"}}`, wantErr: "may not set ANTHROPIC_API_KEY"},
		{name: "env sets HOME", raw: `{"env":{"HOME":"/x"}}`, wantErr: "may not set HOME"},
		{name: "env NUL names the key only", raw: `{"env":{"K":"se\u0000cret"}}`, wantErr: "env K contains a NUL byte"},
		{name: "bad env key", raw: `{"env":{"A=B":"x"}}`, wantErr: "not a variable name"},
		{name: "bad apiKeyEnv", raw: `{"apiKeyEnv":"A=B"}`, wantErr: "apiKeyEnv"},
		{name: "profile without env", raw: `{"authProfiles":{"p":{}}}`, wantErr: `authProfiles["p"].apiKeyEnv`},
		{name: "profile bad url", raw: `{"authProfiles":{"p":{"apiKeyEnv":"K","baseUrl":"ftp://x"}}}`, wantErr: "not an http(s) URL"},
		{name: "bad baseUrl", raw: `{"baseUrl":"localhost:8080"}`, wantErr: "baseUrl"},
		{name: "builtin rule", raw: `{"builtinTools":["Bash(git *)"]}`, wantErr: "not a tool name"},
		{name: "builtin mcp", raw: `{"builtinTools":["mcp__x__y"]}`, wantErr: "MCP tool"},
		{name: "asking mode", raw: `{"permissionMode":"manual"}`, wantErr: "never wait for a person"},
		{name: "negative maxTurns", raw: `{"maxTurns":-1}`, wantErr: "maxTurns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSettings(json.RawMessage(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "cret") || strings.Contains(err.Error(), "sk-x") {
					t.Fatalf("the error %q shows a value", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func TestEnvironIsAllowListed(t *testing.T) {
	t.Setenv("TEAMSTER_WORKER_SECRET", "do-not-pass")
	t.Setenv("ANTHROPIC_API_KEY", "the-workers-own-key")
	t.Setenv("MY_KEY", "sk-profile")
	s := settings{APIKeyEnv: "MY_KEY", BaseURL: "http://127.0.0.1:1", Env: map[string]string{"EXTRA": "1"}}
	c, err := s.credentialsFor("", "")
	if err != nil {
		t.Fatal(err)
	}
	env := s.environ("/home/claude", c)
	for _, want := range []string{"HOME=/home/claude", "ANTHROPIC_API_KEY=sk-profile", "ANTHROPIC_BASE_URL=http://127.0.0.1:1", "EXTRA=1",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "ENABLE_TOOL_SEARCH=false"} {
		if !slices.Contains(env, want) {
			t.Errorf("environment lacks %s", want)
		}
	}
	for _, kv := range env {
		if strings.Contains(kv, "do-not-pass") || strings.Contains(kv, "the-workers-own-key") {
			t.Errorf("environment passes %s", strings.SplitN(kv, "=", 2)[0])
		}
	}
	if v := s.environ("/h", credentials{}); slices.ContainsFunc(v, func(kv string) bool { return strings.HasPrefix(kv, "ANTHROPIC_API_KEY=") }) {
		t.Error("the version probe's environment carries a key")
	}
}

func TestVersions(t *testing.T) {
	v, err := versionOutput("2.1.328 (Claude Code)\n")
	if err != nil || v.String() != "2.1.328" {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := versionOutput("Claude Code"); err == nil {
		t.Fatal("a version line without a version was accepted")
	}
	for _, tc := range []struct {
		got, min string
		ok       bool
	}{
		{"2.1.328", "2.1.328", true}, {"2.1.329", "2.1.328", true}, {"2.1.327", "2.1.328", false},
		{"3.0.0", "2.9", true}, {"2.1.328-beta.1", "2.1.328", false}, {"2.1.328", "99.0.0", false},
	} {
		g, _ := parseVersion(tc.got)
		if err := checkVersion(g, tc.min); (err == nil) != tc.ok {
			t.Errorf("%s against minimum %s: %v", tc.got, tc.min, err)
		}
	}
}

func TestBindings(t *testing.T) {
	for raw, want := range map[string]string{
		``: "", `null`: "", `{"sessionId":"4c4bc4b9-fe2a-4ce8-b830-229e90fa9359"}`: "4c4bc4b9-fe2a-4ce8-b830-229e90fa9359",
	} {
		if got, err := parseBinding(json.RawMessage(raw)); err != nil || got != want {
			t.Errorf("binding %s: %q %v", raw, got, err)
		}
	}
	for _, raw := range []string{`{"threadId":"x"}`, `{"sessionId":"--help"}`, `{"sessionId":"../../etc/passwd-aaaaaaaaaaaaaaaaaaaaa"}`, `[]`} {
		if _, err := parseBinding(json.RawMessage(raw)); err == nil {
			t.Errorf("binding %s accepted", raw)
		}
	}
	if id := newUUID(); !validSessionID(id) {
		t.Fatalf("newUUID %q", id)
	}
}

func TestToolNames(t *testing.T) {
	if got := mcpName("web.search/v2"); got != "web_search_v2" {
		t.Fatalf("mcpName %q", got)
	}
	allow := []string{"Read", "lookup"}
	if got := allowedBuiltins([]string{"Read", "Bash", "Read"}, &allow); !slices.Equal(got, []string{"Read"}) {
		t.Fatalf("allowed builtins %v", got)
	}
	if got := allowedBuiltins([]string{"Read", "Bash"}, nil); !slices.Equal(got, []string{"Read", "Bash"}) {
		t.Fatalf("unrestricted builtins %v", got)
	}
	none := []string{}
	if got := allowedBuiltins([]string{"Read"}, &none); len(got) != 0 {
		t.Fatalf("builtins under an empty toolsAllow %v", got)
	}
}
