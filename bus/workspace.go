package bus

import (
	"path"
	"strings"

	"github.com/teamster-fleet/teamster"
)

// Reply attachments from the worker's workspace (docs/PROTOCOL.md, "Reply
// media"). An attempt with stageReplyMedia asks its worker, once the harness
// has returned ok, to call the host back (HostCallReplyMedia) with the
// turn's assistant texts, and to serve reads of the run's workspace
// (teamster.run.<attemptId>.read, relayed by the routers) until the host
// answers. The reads stop with the run: after it finished, or without its
// lease, nobody serves them.

// MaxReadChunk bounds one read's length: its data, base64 in JSON, stays
// well inside the 1 MiB body.
const MaxReadChunk = 512 << 10

// maxWorkspacePath bounds a read's path.
const maxWorkspacePath = 4096

// The reasons a read is refused, beside its error.
const (
	ReadNotFound = "not_found" // no such file
	ReadDenied   = "denied"    // outside the workspace (.., a symlink out), or not a regular file
)

// ReplyMedia is the body of the host's replyMedia callback: the turn is
// done, and its reply may name files of the worker's workspace (MEDIA:
// lines); the host reads what it needs before it answers (a generic reply).
// Token is what its reads must carry: only the attempt's host, which alone
// receives this callback, can read the run's workspace.
type ReplyMedia struct {
	V              int      `json:"v"`
	AssistantTexts []string `json:"assistantTexts"`
	Token          string   `json:"token"`
	// WorkspaceRoot is the workspace's absolute path on the worker, so that
	// the host can map an absolute path in the reply onto a read's relative
	// one.
	WorkspaceRoot string `json:"workspaceRoot,omitempty"`
}

// Validate checks a replyMedia call.
func (r *ReplyMedia) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := optionalString("workspaceRoot", r.WorkspaceRoot, maxWorkspacePath); err != nil {
		return err
	}
	return CheckID("token", r.Token)
}

// RunRead asks for length bytes at offset of a file of the run's workspace,
// path relative to it (slash-separated), with the token of the replyMedia
// callback it answers.
type RunRead struct {
	V      int    `json:"v"`
	Token  string `json:"token"`
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Length int64  `json:"length"`
}

// Validate checks a read request. A path is relative, clean and stays inside
// the workspace as text; the worker confines it again on the file system.
func (r *RunRead) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := CheckID("token", r.Token); err != nil {
		return err
	}
	if err := requireString("path", r.Path, maxWorkspacePath); err != nil {
		return err
	}
	if !LocalPath(r.Path) {
		return invalid("field path %q is not a relative path inside the workspace", truncate(r.Path, 80))
	}
	if err := checkRange("offset", r.Offset, 0, MaxGeneration); err != nil {
		return err
	}
	return checkRange("length", r.Length, 1, MaxReadChunk)
}

// LocalPath reports whether p is a clean, slash-separated relative path that
// does not leave its root: no leading slash, no "..", no empty or "."
// element, no backslash.
func LocalPath(p string) bool {
	if p == "" || strings.ContainsRune(p, '\\') || path.IsAbs(p) || path.Clean(p) != p || p == "." {
		return false
	}
	return p != ".." && !strings.HasPrefix(p, "../")
}

// RunReadReply answers a read: the bytes (base64 in JSON), the file's whole
// size and whether they reach its end; or a refusal with its reason.
type RunReadReply struct {
	V      int             `json:"v"`
	Status string          `json:"status"`
	Data   []byte          `json:"data,omitempty"`
	Size   int64           `json:"size,omitempty"`
	EOF    bool            `json:"eof,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Error  *teamster.Error `json:"error,omitempty"`
}

// Validate checks a read reply.
func (r *RunReadReply) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	if err := checkReplyStatus(r.Status, r.Error, StatusOK, StatusRejected); err != nil {
		return err
	}
	if len(r.Data) > MaxReadChunk {
		return invalid("field data holds %d bytes, over %d", len(r.Data), MaxReadChunk)
	}
	if err := checkRange("size", r.Size, 0, MaxGeneration); err != nil {
		return err
	}
	switch r.Reason {
	case "", ReadNotFound, ReadDenied:
		return nil
	default:
		return invalid("field reason %q is not %s or %s", truncate(r.Reason, 40), ReadNotFound, ReadDenied)
	}
}

// RunReadSubject is teamster.run.<attemptId>.read.
func RunReadSubject(attemptID string) (string, error) {
	if err := CheckID("attemptId", attemptID); err != nil {
		return "", err
	}
	return prefixRun + attemptID + ".read", nil
}
