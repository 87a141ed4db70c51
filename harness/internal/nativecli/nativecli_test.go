package nativecli

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/injection"
)

func TestVersionOrder(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"0.171.0", "0.171.1", true}, {"0.999.0", "0.1000.0", true}, {"1.0.0-alpha.1", "1.0.0", true},
		{"1.0.0", "1.0.0-alpha.1", false}, {"1.0.0-a", "1.0.0-b", true}, {"1.2", "1.2.0", false}, {"1.2.0+x", "1.2.0", false},
	} {
		a, err1 := ParseVersion(tc.a)
		b, err2 := ParseVersion(tc.b)
		if err1 != nil || err2 != nil || a.Less(b) != tc.less {
			t.Errorf("%s < %s: %v (%v %v)", tc.a, tc.b, a.Less(b), err1, err2)
		}
	}
	for _, s := range []string{"", "x", "1.2.3.4", "1..2", "-1.0.0"} {
		if _, err := ParseVersion(s); err == nil {
			t.Errorf("ParseVersion(%q) accepted", s)
		}
	}
}

func TestEnviron(t *testing.T) {
	t.Setenv("NATIVECLI_TEST_IN", "1")
	env := Inherit([]string{"NATIVECLI_TEST_IN", "NATIVECLI_TEST_UNSET"})
	env["A"] = "x=y"
	if got := Environ(env); !slices.Equal(got, []string{"A=x=y", "NATIVECLI_TEST_IN=1"}) {
		t.Fatalf("Environ %v", got)
	}
	if got := Keys(env); !slices.Equal(got, []string{"A", "NATIVECLI_TEST_IN"}) {
		t.Fatalf("Keys %v", got)
	}
	if ValidEnvName("") || ValidEnvName("A=B") || !ValidEnvName("A_B") {
		t.Fatal("ValidEnvName")
	}
}

func TestStderrLoggerKeepsTheLastLine(t *testing.T) {
	log := logrus.New()
	log.SetOutput(&strings.Builder{})
	l := NewStderrLogger(log)
	_, _ = l.Write([]byte("first\nsecond\n  \npartial"))
	if got := l.Last(); got != "second" {
		t.Fatalf("Last %q", got)
	}
}

func TestSteererRefusesWithoutTheWrite(t *testing.T) {
	var ended atomic.Bool
	var writes, settled int
	s := NewSteerer("x", &ended, func(_ string, _ injection.QueueOptions, guard func() bool) error {
		if !guard() {
			return errors.New("refused")
		}
		writes++
		return nil
	})
	opts := injection.QueueOptions{OnQueueSettled: func(injection.Settlement) { settled++ }}
	if err := s.V2().QueueMessage("m", opts, func() bool { return false }, injection.KindSourceBound); teamster.CodeOf(err) != teamster.CodeSourceRevoked {
		t.Fatalf("assertion false: %v", err)
	}
	if err := s.V1().QueueMessage("m", opts); err != nil || writes != 1 {
		t.Fatalf("V1: %v, %d writes", err, writes)
	}
	ended.Store(true)
	if err := s.V1().QueueMessage("m", opts); teamster.CodeOf(err) != teamster.CodeNoActiveRun || !strings.Contains(err.Error(), "x: the turn has ended") {
		t.Fatalf("ended: %v", err)
	}
	if writes != 1 || settled != 2 {
		t.Fatalf("%d writes, %d settled; want 1 and 2 (the refusals)", writes, settled)
	}
}
