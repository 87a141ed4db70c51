package redisproc

import (
	"net"
	"strconv"
	"testing"
)

// FreePort hands out bindable ports below the kernel's ephemeral range,
// never the same one twice.
func TestFreePortIsBelowTheEphemeralRangeAndNeverRepeats(t *testing.T) {
	lo, hi := belowEphemeral()
	seen := map[int]bool{}
	for i := 0; i < 200; i++ {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d cannot be bound: %v", p, err)
		}
		l.Close()
	}
}
