package router

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

// signalHook closes fired when a log message containing msg is logged.
type signalHook struct {
	msg   string
	fired chan struct{}
	once  sync.Once
}

func (h *signalHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *signalHook) Fire(e *logrus.Entry) error {
	if strings.Contains(e.Message, h.msg) {
		h.once.Do(func() { close(h.fired) })
	}
	return nil
}

// A view whose re-watch is in progress (the NATS server is gone, so the new
// watch waits for an answer that cannot come) stops at once, and leaves no
// goroutine behind: no watch, no reader of one, none of nats.go's waiting on
// a watch's context. Before, stop waited about 10 s here: for the re-watch's
// consumer request, then for the old watch's consumer deletion, each up to
// nats.go's 5 s request timeout.
func TestStopEndsARewatchInProgress(t *testing.T) {
	baseline := goleak.IgnoreCurrent()
	srv, err := testenv.StartNATS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc, err := srv.Connect(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, _, err := bus.Setup(ctx, js, bus.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.SetLevel(logrus.DebugLevel)
	rewatching := &signalHook{msg: "watching anew", fired: make(chan struct{})}
	log.AddHook(rewatching)
	v, err := watchRegistry(ctx, kv, log, nil)
	if err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	subs := nc.NumSubscriptions()
	v.mu.Lock()
	v.lastMsg = time.Now().Add(-staleAfter - time.Second) // the watch is suspect
	v.mu.Unlock()
	select {
	case <-rewatching.fired:
	case <-time.After(5 * bus.HeartbeatInterval):
		t.Fatal("the guard did not watch anew")
	}
	// The new watch's subscription exists: the re-watch waits for the
	// server to create its consumer.
	for deadline := time.Now().Add(10 * time.Second); nc.NumSubscriptions() <= subs; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the re-watch made no subscription")
		}
	}

	stopped := make(chan struct{})
	go func() {
		v.stop()
		close(stopped)
	}()
	// The re-watch would give up by itself after rewatchTimeout (and its
	// consumer request after nats.go's 5 s): stop must not wait for either.
	select {
	case <-stopped:
	case <-time.After(rewatchTimeout / 2):
		t.Fatal("stop waits for the re-watch in progress")
	}
	v.stop() // again: a no-op
	nc.Close()
	testenv.VerifyNoLeaks(t, baseline)
}
