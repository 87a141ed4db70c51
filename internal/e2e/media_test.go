package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/worker"
)

// mediaHost stages reply attachments: on the replyMedia callback it reads
// every MEDIA: line's file from the run's workspace, as a gateway does.
type mediaHost struct {
	*client.Tools
	c        *client.Client
	maxBytes int64

	mu     sync.Mutex
	called int
	token  string
	files  map[string][]byte
	errs   map[string]error
}

func (h *mediaHost) ReplyMedia(ctx context.Context, attemptID string, m bus.ReplyMedia) error {
	h.mu.Lock()
	h.called++
	h.token = m.Token
	h.mu.Unlock()
	for _, text := range m.AssistantTexts {
		for _, line := range strings.Split(text, "\n") {
			p, ok := strings.CutPrefix(strings.TrimSpace(line), "MEDIA:")
			if !ok {
				continue
			}
			b, err := h.c.ReadRunFile(ctx, attemptID, m.Token, p, h.maxBytes)
			h.mu.Lock()
			if err != nil {
				h.errs[p] = err
			} else {
				h.files[p] = b
			}
			h.mu.Unlock()
		}
	}
	return nil
}

// A turn's reply names files of the worker's workspace; while the host stages
// them (the replyMedia callback), it reads them through the fleet, in
// chunks: a file whole, a missing one not found, a symlink out of the
// workspace and a file over the host's limit refused. The reads end with
// the run.
func TestReplyMediaFromTheWorkersWorkspace(t *testing.T) {
	ws := t.TempDir()
	f := fleettest.Start(t, fleettest.Options{Workers: 1, WorkerConfig: func(id string, slots int) *worker.Config {
		return worker.DevConfig(id, slots).WithScriptedWorkspace(filepath.Join(ws, id))
	}})
	host := &mediaHost{Tools: client.NewTools(), c: f.Client, maxBytes: 1 << 20, files: map[string][]byte{}, errs: map[string]error{}}
	srv, err := f.Client.ServeHost("gw-media", host)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	big := make([]byte, bus.MaxReadChunk+50_000) // two chunks, and the prompt stays under 1 MiB
	_, _ = rand.Read(big)
	a := fleettest.Attempt("media:alice", fleettest.Script(
		`{"write":{"path":"out/report.txt","text":"the quarterly report"}}`,
		`{"write":{"path":"out/big.bin","base64":"`+base64.StdEncoding.EncodeToString(big)+`"}}`,
		`{"write":{"path":"leak","symlink":"/etc/hostname"}}`,
		`{"say":"Here it is.\n\nMEDIA:out/report.txt\nMEDIA:out/big.bin\nMEDIA:missing.txt\nMEDIA:leak\nMEDIA:../outside"}`))
	a.HostID = "gw-media"
	a.StageReplyMedia = true
	h := submit(t, f, a)
	r := result(t, h)
	if r.Status != teamster.StatusOK {
		t.Fatalf("result %+v", r)
	}
	if host.called != 1 {
		t.Fatalf("replyMedia called %d times, want once", host.called)
	}
	if got := string(host.files["out/report.txt"]); got != "the quarterly report" {
		t.Errorf("out/report.txt read %q", got)
	}
	if !bytes.Equal(host.files["out/big.bin"], big) {
		t.Errorf("out/big.bin read %d bytes, not the %d written", len(host.files["out/big.bin"]), len(big))
	}
	for path, want := range map[string]error{
		"missing.txt": client.ErrFileNotFound,
		"leak":        client.ErrFileDenied,
		"../outside":  teamster.ErrInvalidRequest,
	} {
		if err := host.errs[path]; !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", path, err, want)
		}
	}
	// The run is over: nobody serves its reads, whatever the token.
	_, err = f.Client.ReadRunFile(t.Context(), h.AttemptID(), host.token, "out/report.txt", 1<<20)
	if !errors.Is(err, teamster.ErrNoActiveRun) {
		t.Fatalf("a read after the run: %v, want no_active_run", err)
	}

	// Over the host's limit (the workspace keeps the file between turns).
	host.maxBytes = 100_000
	c := fleettest.Attempt("media:alice", fleettest.Script(`{"say":"MEDIA:out/big.bin"}`))
	c.HostID, c.StageReplyMedia = "gw-media", true
	if r := result(t, submit(t, f, c)); r.Status != teamster.StatusOK {
		t.Fatalf("result %+v", r)
	}
	if err := host.errs["out/big.bin"]; !errors.Is(err, client.ErrFileTooLarge) {
		t.Errorf("out/big.bin over the limit: %v, want too large", err)
	}

	// Without stageReplyMedia the host is not called.
	b := fleettest.Attempt("media:bob", fleettest.Script(`{"say":"MEDIA:out/report.txt"}`))
	b.HostID = "gw-media"
	if r := result(t, submit(t, f, b)); r.Status != teamster.StatusOK || host.called != 2 {
		t.Fatalf("result %+v, replyMedia called %d times", r, host.called)
	}
}

// A read needs the token of the run's replyMedia callback: another
// gateway that knows the attempt id reads nothing.
func TestReplyMediaReadsNeedTheToken(t *testing.T) {
	ws := t.TempDir()
	f := fleettest.Start(t, fleettest.Options{Workers: 1, WorkerConfig: func(id string, slots int) *worker.Config {
		return worker.DevConfig(id, slots).WithScriptedWorkspace(filepath.Join(ws, id))
	}})
	var stolen error
	host := &tokenHost{Tools: client.NewTools(), read: func(ctx context.Context, attemptID, _ string) {
		_, stolen = f.Client.ReadRunFile(ctx, attemptID, "not-the-token", "secret.txt", 1<<20)
	}}
	srv, err := f.Client.ServeHost("gw-token", host)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	a := fleettest.Attempt("media:carol", fleettest.Script(`{"write":{"path":"secret.txt","text":"s3cret"}}`, `{"say":"MEDIA:secret.txt"}`))
	a.HostID, a.StageReplyMedia = "gw-token", true
	if r := result(t, submit(t, f, a)); r.Status != teamster.StatusOK {
		t.Fatalf("result %+v", r)
	}
	if !errors.Is(stolen, client.ErrFileDenied) {
		t.Fatalf("a read with another token: %v, want denied", stolen)
	}
}

// tokenHost stages reply media with read, given the callback's token.
type tokenHost struct {
	*client.Tools
	read func(ctx context.Context, attemptID, token string)
}

func (h *tokenHost) ReplyMedia(ctx context.Context, attemptID string, m bus.ReplyMedia) error {
	h.read(ctx, attemptID, m.Token)
	return nil
}

// The reads are bound to the run's lease: once it is gone (its key deleted
// in Redis, as a failover that lost it would), the worker stops answering,
// and the turn ends lease_lost.
func TestReplyMediaReadsStopWithTheLease(t *testing.T) {
	ws := t.TempDir()
	f := fleettest.Start(t, fleettest.Options{Workers: 1, LeaseTTL: time.Second, WorkerConfig: func(id string, slots int) *worker.Config {
		return worker.DevConfig(id, slots).WithScriptedWorkspace(filepath.Join(ws, id))
	}})
	const session = "media:dave"
	var before, after error
	done := make(chan struct{})
	host := &tokenHost{Tools: client.NewTools()}
	host.read = func(ctx context.Context, attemptID, token string) {
		defer close(done)
		_, before = f.Client.ReadRunFile(ctx, attemptID, token, "a.txt", 1<<20)
		if err := f.RDB.Del(ctx, "teamster:{"+leases.Tag(session)+"}:lease").Err(); err != nil {
			t.Error(err)
		}
		// Past the lease's TTL: the worker's renewals have failed, and it
		// holds the lease no more (it stops waiting for this answer, too).
		time.Sleep(1500 * time.Millisecond)
		_, after = f.Client.ReadRunFile(ctx, attemptID, token, "a.txt", 1<<20)
	}
	srv, err := f.Client.ServeHost("gw-lease", host)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	a := fleettest.Attempt(session, fleettest.Script(`{"write":{"path":"a.txt","text":"x"}}`, `{"say":"MEDIA:a.txt"}`))
	a.HostID, a.StageReplyMedia = "gw-lease", true
	r := result(t, submit(t, f, a))
	<-done
	if before != nil {
		t.Fatalf("a read under the lease: %v", before)
	}
	if !errors.Is(after, teamster.ErrNoActiveRun) {
		t.Fatalf("a read after the lease went: %v, want no_active_run", after)
	}
	if r.Error == nil || r.Error.Code != teamster.CodeLeaseLost {
		t.Fatalf("result %+v, want lease_lost", r)
	}
}
