package bus_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

// The native state store: an object put is read back whole, refused over
// the reader's bound, missing once deleted (ErrStateMissing), and deleting a
// missing object is no error.
func TestNativeStateObjects(t *testing.T) {
	_, _, js := connect(t)
	ctx := context.Background()
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	name := bus.StateObjectName("0123456789abcdef01234567", "e1a2:7")
	if name != "0123456789abcdef01234567.e1a2-7" {
		t.Fatalf("object name %q", name)
	}
	// Larger than one chunk of the object store (128 KiB).
	blob := bytes.Repeat([]byte("transcript line\n"), 40_000)
	if err := st.Put(ctx, name, blob); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, name, int64(len(blob)))
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("get: %d bytes (%v), want the %d put", len(got), err, len(blob))
	}
	if _, err := st.Get(ctx, name, int64(len(blob))-1); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("get over the bound: %v", err)
	}
	if err := st.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, name, 0); !errors.Is(err, bus.ErrStateMissing) {
		t.Fatalf("get after delete: %v, want ErrStateMissing", err)
	}
	if err := st.Delete(ctx, name); err != nil {
		t.Fatalf("delete of a missing object: %v", err)
	}
}

// BenchmarkNativeStateRoundTrip: what carrying a session's native state costs
// a turn: one put after it, one get before the next, for a 256 KiB
// transcript, on an embedded server.
func BenchmarkNativeStateRoundTrip(b *testing.B) {
	srv := testenv.NewNATS(b)
	_, js := srv.JetStream(b)
	ctx := context.Background()
	if _, _, err := bus.Setup(ctx, js, bus.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	blob := bytes.Repeat([]byte(`{"type":"message","text":"lorem ipsum dolor sit amet"}`+"\n"), 256<<10/55)
	b.SetBytes(int64(len(blob)))
	b.ResetTimer()
	for i := range b.N {
		name := bus.StateObjectName("bench", "e:"+string(rune('a'+i%26)))
		if err := st.Put(ctx, name, blob); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Get(ctx, name, 0); err != nil {
			b.Fatal(err)
		}
	}
}
