package bus_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

func TestValidID(t *testing.T) {
	for _, s := range []string{"a", "A", "0", "codex", "claude-cli", "voice_call", "01JD5Z4N8B7ZK3Q2W8E6RDX1VA", "a-", "a_", idOfLen(64)} {
		if !bus.ValidID(s) {
			t.Errorf("ValidID(%q) = false, want true", s)
		}
		if err := bus.CheckID("harnessId", s); err != nil {
			t.Errorf("CheckID(%q) = %v, want nil", s, err)
		}
	}
	for _, bad := range badIDs() {
		t.Run(bad.name, func(t *testing.T) {
			if bus.ValidID(bad.id) {
				t.Fatalf("ValidID(%q) = true, want false", bad.id)
			}
			err := bus.CheckID("harnessId", bad.id)
			if !errors.Is(err, teamster.ErrInvalidRequest) {
				t.Fatalf("CheckID(%q) = %v, want invalid_request", bad.id, err)
			}
			if !strings.Contains(err.Error(), "harnessId") {
				t.Errorf("CheckID error %q does not name the field", err)
			}
		})
	}
}

func TestCheckIDEchoesOnlyAPrefix(t *testing.T) {
	err := bus.CheckID("attemptId", strings.Repeat("é", 500))
	msg := teamster.AsError(err).Message
	if !utf8.ValidString(msg) {
		t.Fatalf("message is not valid UTF-8: %q", msg)
	}
	if len(msg) > 300 {
		t.Fatalf("message is %d bytes; a long id is echoed in full", len(msg))
	}
}

// subjectBuilders build a subject from one identifier each.
var subjectBuilders = []struct {
	name  string
	build func(string) (string, error)
	want  func(id string) string
}{
	{"AttemptSubject", bus.AttemptSubject, func(id string) string { return "teamster.attempt." + id }},
	{"ResultSubject", bus.ResultSubject, func(id string) string { return "teamster.result." + id }},
	{"SubmitDelegateSubject", bus.SubmitDelegateSubject, func(id string) string { return "teamster.submit.delegate." + id }},
	{"RunInjectSubject", bus.RunInjectSubject, func(id string) string { return "teamster.run." + id + ".inject" }},
	{"RunCancelSubject", bus.RunCancelSubject, func(id string) string { return "teamster.run." + id + ".cancel" }},
	{"HostSubjects", bus.HostSubjects, func(id string) string { return "teamster.host." + id + ".>" }},
	{"WorkerControlSubject", bus.WorkerControlSubject, func(id string) string { return "teamster.worker." + id + ".control" }},
	{"HostSubject(hostId)", func(id string) (string, error) { return bus.HostSubject(id, "a1", bus.HostCallTool) }, func(id string) string { return "teamster.host." + id + ".a1.tool" }},
	{"HostSubject(attemptId)", func(id string) (string, error) { return bus.HostSubject("gw1", id, bus.HostCallTool) }, func(id string) string { return "teamster.host.gw1." + id + ".tool" }},
}

func TestSubjectBuilders(t *testing.T) {
	for _, b := range subjectBuilders {
		t.Run(b.name, func(t *testing.T) {
			for _, id := range []string{"a", "codex", "01JD5Z4N8B7ZK3Q2W8E6RDX1VA", idOfLen(64)} {
				got, err := b.build(id)
				if err != nil {
					t.Fatalf("%s(%q): %v", b.name, id, err)
				}
				if want := b.want(id); got != want {
					t.Errorf("%s(%q) = %q, want %q", b.name, id, got, want)
				}
			}
			for _, bad := range badIDs() {
				got, err := b.build(bad.id)
				if !errors.Is(err, teamster.ErrInvalidRequest) {
					t.Errorf("%s with id %s: error %v, want invalid_request", b.name, bad.name, err)
				}
				if got != "" {
					t.Errorf("%s with id %s returned subject %q along with its error", b.name, bad.name, got)
				}
			}
		})
	}
}

// TestNoBadTokenInSubjects checks that no string that could split, widen or
// break a subject ever becomes a token, whatever it contains.
func TestNoBadTokenInSubjects(t *testing.T) {
	var inputs []string
	for _, c := range []string{".", "*", ">", " ", "\t", "\n", "\r", "\x00", "\u00a0", "\u2028", "é"} {
		inputs = append(inputs, c, "a"+c, c+"a", "a"+c+"b")
	}
	inputs = append(inputs, "", "..", "a..b", "teamster.>", "*.*")
	for _, b := range subjectBuilders {
		for _, in := range inputs {
			if s, err := b.build(in); err == nil {
				t.Errorf("%s(%q) = %q, want an error", b.name, in, s)
			}
		}
	}
	for _, in := range inputs {
		if ok := bus.ValidID(in); ok {
			t.Errorf("ValidID(%q) = true", in)
		}
	}
}

func TestHostSubjectCalls(t *testing.T) {
	for _, call := range []string{bus.HostCallTool, bus.HostCallToolTerminal, bus.HostCallUserInput, bus.HostCallUsage} {
		got, err := bus.HostSubject("gw-1", "a1", call)
		if err != nil {
			t.Errorf("HostSubject call %s: %v", call, err)
			continue
		}
		if want := "teamster.host.gw-1.a1." + call; got != want {
			t.Errorf("HostSubject call %s = %q, want %q", call, got, want)
		}
	}
	if got := []string{bus.HostCallTool, bus.HostCallToolTerminal, bus.HostCallUserInput, bus.HostCallUsage}; strings.Join(got, ",") != "tool,toolTerminal,userInput,usage" {
		t.Errorf("host call names %v are not the contract's tool, toolTerminal, userInput, usage", got)
	}
	for _, call := range []string{"", "Tool", "tool_terminal", "toolterminal", "user-input", "usage.x", "*", ">", "control", "tool "} {
		if s, err := bus.HostSubject("gw-1", "a1", call); !errors.Is(err, teamster.ErrInvalidRequest) {
			t.Errorf("HostSubject call %q = %q, %v; want invalid_request", call, s, err)
		}
	}
}

func TestDelegateFromSubject(t *testing.T) {
	for _, tc := range []struct{ subject, want string }{
		{"teamster.submit.delegate.voice-call", "voice-call"},
		{"teamster.submit.delegate.a", "a"},
		{"teamster.submit.delegate." + idOfLen(64), idOfLen(64)},
	} {
		got, err := bus.DelegateFromSubject(tc.subject)
		if err != nil || got != tc.want {
			t.Errorf("DelegateFromSubject(%q) = %q, %v; want %q", tc.subject, got, err, tc.want)
		}
	}
	for _, subject := range []string{
		"", "teamster.submit", "teamster.submit.delegate", "teamster.submit.delegate.",
		"teamster.submit.delegate.a.b", "teamster.submit.delegate.*", "teamster.submit.delegate.>",
		"teamster.submit.delegate.a b", "teamster.submit.delegate._a", "teamster.submit.delegate." + idOfLen(65),
		"teamster.submit.delegatex", "teamster.submit.delegatevoice", "xteamster.submit.delegate.voice",
		"teamster.session.create", "TEAMSTER.SUBMIT.DELEGATE.voice", "teamster.submit.delegate..voice",
	} {
		got, err := bus.DelegateFromSubject(subject)
		if !errors.Is(err, teamster.ErrInvalidRequest) || got != "" {
			t.Errorf("DelegateFromSubject(%q) = %q, %v; want invalid_request", subject, got, err)
		}
	}
	t.Run("round trip with SubmitDelegateSubject", func(t *testing.T) {
		s, err := bus.SubmitDelegateSubject("voice-call")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := bus.DelegateFromSubject(s); err != nil || got != "voice-call" {
			t.Fatalf("DelegateFromSubject(%q) = %q, %v", s, got, err)
		}
	})
}

func TestSessionOpSubjects(t *testing.T) {
	for _, op := range []string{bus.SessionCreate, bus.SessionPatch, bus.SessionReset, bus.SessionDelete, bus.SessionArchive} {
		s, err := bus.SessionOpSubject(op)
		if err != nil {
			t.Fatalf("SessionOpSubject(%q): %v", op, err)
		}
		if want := "teamster.session." + op; s != want {
			t.Errorf("SessionOpSubject(%q) = %q, want %q", op, s, want)
		}
		got, err := bus.SessionOpFromSubject(s)
		if err != nil || got != op {
			t.Errorf("SessionOpFromSubject(%q) = %q, %v; want %q", s, got, err, op)
		}
	}
	for _, op := range []string{"", "get", "Create", "create.x", "*", ">", "create "} {
		if s, err := bus.SessionOpSubject(op); !errors.Is(err, teamster.ErrInvalidRequest) || s != "" {
			t.Errorf("SessionOpSubject(%q) = %q, %v; want invalid_request", op, s, err)
		}
	}
	for _, subject := range []string{
		"", "teamster.session", "teamster.session.", "teamster.session.get", "teamster.session.create.x",
		"teamster.session.*", "teamster.session.>", "teamster.session.Create", "teamster.sessions.create",
		"teamster.session..create", "teamster.submit.delegate.create", "teamster.session.create ",
	} {
		got, err := bus.SessionOpFromSubject(subject)
		if !errors.Is(err, teamster.ErrInvalidRequest) || got != "" {
			t.Errorf("SessionOpFromSubject(%q) = %q, %v; want invalid_request", subject, got, err)
		}
	}
}

func TestNamesOfTheContract(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{bus.SubjectSubmit, "teamster.submit"},
		{bus.SubjectSubmitDelegates, "teamster.submit.delegate.*"},
		{bus.SubjectInject, "teamster.inject"},
		{bus.SubjectSourceGrant, "teamster.source.grant"},
		{bus.SubjectSourceRevoke, "teamster.source.revoke"},
		{bus.SubjectSessionOps, "teamster.session.*"},
		{bus.SubjectAttempts, "teamster.attempt.>"},
		{bus.SubjectResults, "teamster.result.>"},
		{bus.StreamAttempts, "TEAMSTER_ATTEMPTS"},
		{bus.StreamResults, "TEAMSTER_RESULTS"},
		{bus.BucketWorkers, "TEAMSTER_WORKERS"},
		{bus.QueueRouters, "routers"},
		{bus.ConsumerName("codex"), "harness_codex"},
		{bus.ResultMsgID("a1"), "result-a1"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// ValidID's hand-written check agrees with the identifier pattern.
func TestValidIDMatchesPattern(t *testing.T) {
	cases := []string{"", "a", "A9", "a.b", "*", ">", "a b", "-a", "_a", "a-_b", "é", "aé",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "a\x00", "Z_z-9"}
	for _, c := range cases {
		if got, want := bus.ValidID(c), regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`).MatchString(c); got != want {
			t.Errorf("ValidID(%q) = %v, pattern says %v", c, got, want)
		}
	}
}

func FuzzValidID(f *testing.F) {
	f.Add("abc")
	f.Add("a.b")
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if bus.ValidID(s) != re.MatchString(s) {
			t.Fatalf("ValidID(%q) disagrees with the pattern", s)
		}
	})
}
