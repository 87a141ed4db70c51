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
