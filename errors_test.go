package teamster

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sentinels maps every code of the contract to its sentinel.
var sentinels = map[Code]*Error{
	CodeInvalidRequest:          ErrInvalidRequest,
	CodePayloadTooLarge:         ErrPayloadTooLarge,
	CodeHarnessNotRegistered:    ErrHarnessNotRegistered,
	CodeHarnessUnsupportedRoute: ErrHarnessUnsupportedRoute,
	CodeDelegationDenied:        ErrDelegationDenied,
	CodeOwnerOnly:               ErrOwnerOnly,
	CodeSessionBusy:             ErrSessionBusy,
	CodeNoActiveRun:             ErrNoActiveRun,
	CodeInjectionRequiresV2:     ErrInjectionRequiresV2,
	CodeSourceRevoked:           ErrSourceRevoked,
	CodeQueueTimeout:            ErrQueueTimeout,
	CodeWorkerLost:              ErrWorkerLost,
	CodeLeaseLost:               ErrLeaseLost,
	CodeDeadlineExceeded:        ErrDeadlineExceeded,
	CodeCancelled:               ErrCancelled,
	CodeDrainTimeout:            ErrDrainTimeout,
	CodeRuntimeArtifactMismatch: ErrRuntimeArtifactMismatch,
	CodeHarnessFailed:           ErrHarnessFailed,
	CodeInternal:                ErrInternal,
}

func TestCodesOfTheContract(t *testing.T) {
	// The wire spelling of every code, as docs/PROTOCOL.md lists them.
	want := []string{
		"invalid_request", "payload_too_large", "harness_not_registered", "harness_unsupported_route",
		"delegation_denied", "owner_only", "session_busy", "no_active_run", "injection_requires_v2",
		"source_revoked", "queue_timeout", "worker_lost", "lease_lost", "deadline_exceeded", "cancelled",
		"drain_timeout", "runtime_artifact_mismatch", "harness_failed", "internal",
	}
	if len(sentinels) != len(want) {
		t.Fatalf("%d sentinels, want %d", len(sentinels), len(want))
	}
	for _, s := range want {
		c := Code(s)
		if !c.Valid() {
			t.Errorf("code %s is not Valid", s)
		}
		e, ok := sentinels[c]
		if !ok {
			t.Errorf("code %s has no sentinel", s)
			continue
		}
		if e.Code != c || e.Message != "" || e.SideEffects != "" {
			t.Errorf("sentinel of %s is %#v", s, e)
		}
	}
	for _, s := range []string{"", "INTERNAL", "Internal", "internal ", "timeout", "ok", "error", "unknown", "session-busy"} {
		if Code(s).Valid() {
			t.Errorf("Code(%q).Valid() = true, want false", s)
		}
	}
}

func TestResultStatus(t *testing.T) {
	want := map[Code]Status{
		CodeInvalidRequest:          StatusError,
		CodePayloadTooLarge:         StatusError,
		CodeHarnessNotRegistered:    StatusError,
		CodeHarnessUnsupportedRoute: StatusError,
		CodeDelegationDenied:        StatusError,
		CodeOwnerOnly:               StatusError,
		CodeSessionBusy:             StatusError,
		CodeNoActiveRun:             StatusError,
		CodeInjectionRequiresV2:     StatusError,
		CodeSourceRevoked:           StatusError,
		CodeQueueTimeout:            StatusTimeout,
		CodeWorkerLost:              StatusError,
		CodeLeaseLost:               StatusError,
		CodeDeadlineExceeded:        StatusTimeout,
		CodeCancelled:               StatusCancelled,
		CodeDrainTimeout:            StatusCancelled,
		CodeRuntimeArtifactMismatch: StatusError,
		CodeHarnessFailed:           StatusError,
		CodeInternal:                StatusError,
	}
	for code := range sentinels {
		if got := code.ResultStatus(); got != want[code] {
			t.Errorf("%s.ResultStatus() = %s, want %s", code, got, want[code])
		}
	}
}

func TestIsMatchesByCode(t *testing.T) {
	for code, sentinel := range sentinels {
		t.Run(string(code), func(t *testing.T) {
			err := Errorf(code, "detail %d", 7)
			if !errors.Is(err, sentinel) {
				t.Errorf("errors.Is(%v, sentinel of %s) = false", err, code)
			}
			for other, s := range sentinels {
				if other != code && errors.Is(err, s) {
					t.Errorf("errors.Is(%v, sentinel of %s) = true", err, other)
				}
			}
			if errors.Is(err, errors.New(string(code))) {
				t.Errorf("a %s error matches a plain error with the same text", code)
			}
		})
	}
}

func TestIsAcrossJSON(t *testing.T) {
	for code, sentinel := range sentinels {
		t.Run(string(code), func(t *testing.T) {
			sent := &Error{Code: code, Message: "it <broke> & stayed broken", SideEffects: SideEffectsPossible}
			b, err := json.Marshal(sent)
			if err != nil {
				t.Fatal(err)
			}
			var got *Error
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("decoding %s: %v", b, err)
			}
			if diff := cmp.Diff(sent, got); diff != "" {
				t.Errorf("round trip (-sent +got):\n%s", diff)
			}
			if !errors.Is(got, sentinel) {
				t.Errorf("decoded error does not match the sentinel of %s", code)
			}
			other := ErrInternal
			if code == CodeInternal {
				other = ErrInvalidRequest
			}
			if errors.Is(got, other) {
				t.Errorf("decoded %s error matches the sentinel of %s", code, other.Code)
			}
			if !errors.Is(fmt.Errorf("reply: %w", got), sentinel) {
				t.Errorf("wrapped decoded error does not match the sentinel of %s", code)
			}
		})
	}
}

func TestWireForm(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *Error
		want string
	}{
		{"code only", &Error{Code: CodeInternal}, `{"code":"internal"}`},
		{"with message", Errorf(CodeSessionBusy, "held by %s", "w1"), `{"code":"session_busy","message":"held by w1"}`},
		{"with side effects", Errorf(CodeWorkerLost, "gone").WithSideEffects(SideEffectsPossible), `{"code":"worker_lost","message":"gone","sideEffects":"possible"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.err)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("Marshal = %s, want %s", b, tc.want)
			}
		})
	}
}

func TestUnmarshalJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want *Error // nil: refused
	}{
		{"code only", `{"code":"owner_only"}`, &Error{Code: CodeOwnerOnly}},
		{"sideEffects none", `{"code":"cancelled","sideEffects":"none"}`, &Error{Code: CodeCancelled, SideEffects: SideEffectsNone}},
		{"sideEffects possible", `{"code":"lease_lost","message":"m","sideEffects":"possible"}`, &Error{Code: CodeLeaseLost, Message: "m", SideEffects: SideEffectsPossible}},
		{"unknown fields ignored", `{"code":"internal","retryable":true}`, &Error{Code: CodeInternal}},

		{"unknown code", `{"code":"teapot"}`, nil},
		{"code in capitals", `{"code":"INTERNAL"}`, nil},
		{"empty code", `{"code":""}`, nil},
		{"missing code", `{"message":"m"}`, nil},
		{"empty object", `{}`, nil},
		{"code null", `{"code":null}`, nil},
		{"code as a number", `{"code":1}`, nil},
		{"sideEffects maybe", `{"code":"internal","sideEffects":"maybe"}`, nil},
		{"sideEffects in capitals", `{"code":"internal","sideEffects":"NONE"}`, nil},
		{"sideEffects as a boolean", `{"code":"internal","sideEffects":true}`, nil},
		{"message as a number", `{"code":"internal","message":1}`, nil},
		{"a string", `"internal"`, nil},
		{"an array", `["internal"]`, nil},
		{"malformed", `{"code":"internal"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Error
			err := json.Unmarshal([]byte(tc.in), &got)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = %#v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, &got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("refusal leaves the value alone", func(t *testing.T) {
		e := Error{Code: CodeInternal, Message: "kept"}
		if err := json.Unmarshal([]byte(`{"code":"teapot","message":"new"}`), &e); err == nil {
			t.Fatal("unknown code accepted")
		}
		if e.Code != CodeInternal || e.Message != "kept" {
			t.Errorf("refused decode changed the value to %#v", e)
		}
	})
	t.Run("refusal does not echo a long code", func(t *testing.T) {
		long := make([]byte, 10_000)
		for i := range long {
			long[i] = 'x'
		}
		err := json.Unmarshal([]byte(`{"code":"`+string(long)+`"}`), new(Error))
		if err == nil || len(err.Error()) > 200 {
			t.Fatalf("error %.300v, want a short refusal", err)
		}
	})
	t.Run("null error field is no error", func(t *testing.T) {
		var reply struct {
			Error *Error `json:"error"`
		}
		if err := json.Unmarshal([]byte(`{"error":null}`), &reply); err != nil || reply.Error != nil {
			t.Fatalf("got %v, %v; want nil, nil", reply.Error, err)
		}
	})
}

func TestErrorString(t *testing.T) {
	if got := ErrSessionBusy.Error(); got != "session_busy" {
		t.Errorf("Error() = %q, want session_busy", got)
	}
	if got := Errorf(CodeSessionBusy, "held by %s", "w1").Error(); got != "session_busy: held by w1" {
		t.Errorf("Error() = %q", got)
	}
}

func TestWithSideEffects(t *testing.T) {
	e := ErrWorkerLost.WithSideEffects(SideEffectsPossible)
	if e == ErrWorkerLost {
		t.Fatal("WithSideEffects returned the sentinel itself")
	}
	if e.SideEffects != SideEffectsPossible || e.Code != CodeWorkerLost {
		t.Errorf("WithSideEffects = %#v", e)
	}
	if ErrWorkerLost.SideEffects != "" {
		t.Errorf("WithSideEffects modified the sentinel: %#v", ErrWorkerLost)
	}
	if !errors.Is(e, ErrWorkerLost) {
		t.Error("a copy with side effects no longer matches its sentinel")
	}
}

func TestWrapped(t *testing.T) {
	base := Errorf(CodeSourceRevoked, "generation 3")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"wrapped once", fmt.Errorf("inject: %w", base)},
		{"wrapped twice", fmt.Errorf("router: %w", fmt.Errorf("inject: %w", base))},
		{"joined", errors.Join(errors.New("other"), base)},
		{"wrapped with another error", fmt.Errorf("%w and %w", errors.New("first"), base)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, ErrSourceRevoked) {
				t.Errorf("errors.Is(%v, ErrSourceRevoked) = false", tc.err)
			}
			if errors.Is(tc.err, ErrInternal) {
				t.Errorf("errors.Is(%v, ErrInternal) = true", tc.err)
			}
			if got := AsError(tc.err); got != base {
				t.Errorf("AsError = %#v, want the wrapped error itself", got)
			}
			if got := CodeOf(tc.err); got != CodeSourceRevoked {
				t.Errorf("CodeOf = %q, want source_revoked", got)
			}
		})
	}
}

func TestAsErrorAndCodeOf(t *testing.T) {
	t.Run("nil", func(t *testing.T) {
		if got := AsError(nil); got != nil {
			t.Errorf("AsError(nil) = %#v, want nil", got)
		}
		if got := CodeOf(nil); got != "" {
			t.Errorf("CodeOf(nil) = %q, want empty", got)
		}
	})
	t.Run("an *Error is returned as is", func(t *testing.T) {
		e := Errorf(CodeOwnerOnly, "x")
		if got := AsError(e); got != e {
			t.Errorf("AsError returned %p, want %p", got, e)
		}
		if got := CodeOf(e); got != CodeOwnerOnly {
			t.Errorf("CodeOf = %q", got)
		}
	})
	t.Run("another error becomes internal with its text", func(t *testing.T) {
		got := AsError(errors.New("redis: connection refused"))
		want := &Error{Code: CodeInternal, Message: "redis: connection refused"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if c := CodeOf(errors.New("x")); c != CodeInternal {
			t.Errorf("CodeOf(plain error) = %q, want internal", c)
		}
	})
}

func TestNilErrorMatchesNothing(t *testing.T) {
	var nilErr *Error
	if errors.Is(nilErr, ErrInternal) {
		t.Error("a nil *Error matches ErrInternal")
	}
	if errors.Is(ErrInternal, nilErr) {
		t.Error("ErrInternal matches a nil *Error")
	}
}
