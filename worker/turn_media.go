package worker

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
)

// Reply attachments from the run's workspace (docs/PROTOCOL.md, "Reply
// media"). Once the harness returned ok, an attempt with stageReplyMedia
// gets one more step before its finish: the worker opens the harness's
// workspace for reading, subscribes the run's read subject
// (teamster.worker.<workerId>.run.<attemptId>.read, where the routers relay
// teamster.run.<attemptId>.read), and calls its host back (replyMedia)
// with the reply's texts and a one-time token. The host reads the files the
// reply names, then answers; the worker closes the workspace and finishes.
// A read is answered only with the token, while the lease is current and
// before the finish, inside the workspace (os.Root: no "..", no symlink
// out), from a regular file, at most bus.MaxReadChunk bytes at a time.

// replyMediaTimeout bounds the replyMedia callback: how long the host may
// take to read the reply's attachments.
const replyMediaTimeout = 2 * time.Minute

// mediaReader is a run's open workspace while its host stages the reply's
// attachments.
type mediaReader struct {
	root  *os.Root
	token string
}

// stageReplyMedia is the step: nothing for an attempt that did not ask, has
// no host, or runs on a harness without a workspace. Its failures are
// logged, never the turn's: the host reports attachments it could not read.
func (r *run) stageReplyMedia(out *harness.Outcome) {
	a := r.attempt
	if !a.StageReplyMedia || a.HostID == "" {
		return
	}
	ws, ok := r.h.impl.(harness.Workspacer)
	dir := ""
	if ok {
		dir = ws.Workspace(&harness.Run{Attempt: a, WorkerID: r.w.id, Fence: r.lease.Fence()})
	}
	if dir == "" {
		r.log().Debug("reply media: the harness has no workspace; nothing to stage")
		return
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		r.log().Warn("reply media: open the workspace: " + err.Error())
		return
	}
	defer root.Close()
	var b [16]byte
	_, _ = rand.Read(b[:])
	mr := &mediaReader{root: root, token: hex.EncodeToString(b[:])}
	sub, err := r.subscribeReads(mr)
	if err != nil {
		r.log().Warn("reply media: subscribe the run's reads: " + err.Error())
		return
	}
	defer func() {
		_ = sub.Unsubscribe()
		r.media.Store(nil)
	}()
	ctx, cancel := context.WithTimeout(r.ctx, replyMediaTimeout)
	defer cancel()
	var rep bus.Reply
	if err := (*host)(r).call(ctx, bus.HostCallReplyMedia, &bus.ReplyMedia{V: bus.Version, AssistantTexts: out.AssistantTexts, Token: mr.token, WorkspaceRoot: dir}, &rep); err != nil {
		r.log().Warn("reply media: the host did not answer: " + err.Error())
		return
	}
	if rep.Status != bus.StatusOK && rep.Error != nil {
		r.log().WithField("code", rep.Error.Code).Info("reply media: the host reported: " + rep.Error.Message)
	}
}

// subscribeReads serves the run's read subject from mr until the returned
// subscription ends.
func (r *run) subscribeReads(mr *mediaReader) (*nats.Subscription, error) {
	subj, err := bus.WorkerRunSubject(r.w.cfg.WorkerID, r.attempt.ScopedID(), "read")
	if err != nil {
		return nil, err
	}
	r.media.Store(mr)
	sub, err := r.w.nc.ChanSubscribe(subj, r.w.runs.msgs)
	if err != nil {
		r.media.Store(nil)
		return nil, err
	}
	return sub, nil
}

// onRead serves one read of the run's workspace.
func (r *run) onRead(m *nats.Msg) {
	respond(m, r.read(m.Data))
}

func (r *run) read(data []byte) *bus.RunReadReply {
	refuse := func(reason string, e *teamster.Error) *bus.RunReadReply {
		return &bus.RunReadReply{V: bus.Version, Status: bus.StatusRejected, Reason: reason, Error: e}
	}
	var req bus.RunRead
	if err := bus.Decode(data, &req); err != nil {
		return refuse("", teamster.AsError(err))
	}
	mr := r.media.Load()
	if mr == nil || r.at() >= stepFinish || !r.lease.Current() {
		return refuse("", teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s serves no reads now", r.attempt.AttemptID))
	}
	if subtle.ConstantTimeCompare([]byte(req.Token), []byte(mr.token)) != 1 {
		return refuse(bus.ReadDenied, teamster.Errorf(teamster.CodeInvalidRequest, "the read's token is not this run's"))
	}
	f, err := mr.root.Open(req.Path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return refuse(bus.ReadNotFound, teamster.Errorf(teamster.CodeInvalidRequest, "%s: no such file in the workspace", req.Path))
		}
		// os.Root refuses a path that leaves the root, through ".." or a
		// symlink; permissions and the rest are refusals too.
		return refuse(bus.ReadDenied, teamster.Errorf(teamster.CodeInvalidRequest, "%s: %v", req.Path, trimRootErr(err)))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return refuse(bus.ReadDenied, teamster.Errorf(teamster.CodeInvalidRequest, "%s is not a regular file", req.Path))
	}
	size := fi.Size()
	if req.Offset >= size {
		return &bus.RunReadReply{V: bus.Version, Status: bus.StatusOK, Size: size, EOF: true}
	}
	buf := make([]byte, min(req.Length, size-req.Offset))
	n, err := f.ReadAt(buf, req.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return refuse("", teamster.Errorf(teamster.CodeInternal, "%s: read: %v", req.Path, err))
	}
	return &bus.RunReadReply{V: bus.Version, Status: bus.StatusOK, Data: buf[:n], Size: size, EOF: req.Offset+int64(n) >= size}
}

// trimRootErr is err without the workspace's absolute path (a *PathError
// names the path as the caller gave it; os.Root's errors name only that).
func trimRootErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
