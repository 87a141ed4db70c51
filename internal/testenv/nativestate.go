package testenv

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/bus"
)

// StateObjects are the names of the objects in TEAMSTER_NATIVE_STATE,
// sorted, read over nc.
func StateObjects(t testing.TB, nc *nats.Conn) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	return names
}

// StateObjectsSettled is StateObjects once the store holds n objects, or
// after 10 s, whichever comes first: a worker deletes the object a turn
// replaced after it delivered the turn's result, so a listing made right
// after the result may still show it. The caller asserts on what it returns.
func StateObjectsSettled(t testing.TB, nc *nats.Conn, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		names := StateObjects(t, nc)
		if len(names) == n || time.Now().After(deadline) {
			return names
		}
		time.Sleep(20 * time.Millisecond)
	}
}
