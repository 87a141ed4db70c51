package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/teamster-fleet/teamster/bus"
)

// Reply attachments from a run's workspace: the worker running an attempt
// with StageReplyMedia calls its host back (HostReplyMedia) once the harness
// returned, and serves reads of its workspace until the host answers.

// HostReplyMedia is what a Host also implements to stage the reply
// attachments of the attempts it submits with StageReplyMedia: m holds the
// reply's texts (whose MEDIA: lines name the files) and the token that
// ReadRunFile needs. The worker waits for the answer (2 min at most) before
// it finishes the attempt; an error is logged by the worker, never the
// turn's. A Host without it answers at once, and reads nothing.
type HostReplyMedia interface {
	ReplyMedia(ctx context.Context, attemptID string, m bus.ReplyMedia) error
}

// Why ReadRunFile refused a file (errors.Is).
var (
	ErrFileNotFound = errors.New("no such file in the run's workspace")
	ErrFileDenied   = errors.New("the run's workspace does not give out that path")
	ErrFileTooLarge = errors.New("the file is larger than allowed")
)

// ReadRunFile reads path (relative to the run's workspace) of a running
// attempt, with the token of its replyMedia callback, at most maxBytes:
// through teamster.run.<attemptId>.read, relayed to the worker, in chunks of
// bus.MaxReadChunk. A missing file is ErrFileNotFound, a path outside the
// workspace (a symlink out included) or not a regular file ErrFileDenied, a
// file over maxBytes ErrFileTooLarge; a run that serves no reads (finished,
// lease gone) is no_active_run.
func (c *Client) ReadRunFile(ctx context.Context, attemptID, token, path string, maxBytes int64) ([]byte, error) {
	subj, err := bus.RunReadSubject(attemptID)
	if err != nil {
		return nil, err
	}
	var out []byte
	for {
		req := bus.RunRead{V: bus.Version, Token: token, Path: path, Offset: int64(len(out)), Length: bus.MaxReadChunk}
		var rep bus.RunReadReply
		if err := c.request(ctx, subj, nil, &req, &rep); err != nil {
			return nil, err
		}
		if rep.Status != bus.StatusOK {
			switch rep.Reason {
			case bus.ReadNotFound:
				return nil, fmt.Errorf("%s: %w (%s)", path, ErrFileNotFound, rep.Error.Message)
			case bus.ReadDenied:
				return nil, fmt.Errorf("%s: %w (%s)", path, ErrFileDenied, rep.Error.Message)
			}
			return nil, rep.Error
		}
		if rep.Size > maxBytes {
			return nil, fmt.Errorf("%s: %w: %d bytes, over %d", path, ErrFileTooLarge, rep.Size, maxBytes)
		}
		out = append(out, rep.Data...)
		if rep.EOF || len(rep.Data) == 0 {
			return out, nil
		}
	}
}
