package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Native state: what a harness needs on local disk to resume a session's
// native thread (Codex's rollout, Claude's transcript), kept in the object
// store TEAMSTER_NATIVE_STATE so that the session's next turn can resume on
// any worker. A worker saves it after a successful turn under an object name
// that carries the turn's fence, and the fenced finish writes that name into
// the session record (nativeState): a worker that lost its lease may still
// upload, but no record ever names its object, so a stale writer never
// replaces the state of a later turn. The record names one object at a time;
// the worker deletes the object it replaced once its finish committed, the
// router deletes the record's object on session reset and delete.

// nativeStateBucketConfig is the object store TEAMSTER_NATIVE_STATE: file
// storage, compressed (transcripts are text), replicated like the streams.
func nativeStateBucketConfig(o StreamOptions) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      BucketNativeState,
		Description: "teamster: sessions' native harness state, one object per committed turn",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas(o),
		Compression: true,
	}
}

// NativeState is the object store of sessions' native state. Put and Delete
// go through the object store; Get and List read its stream by direct get and
// create no consumer (only routers create consumers), so a reader
// needs $JS.API.STREAM.INFO.OBJ_TEAMSTER_NATIVE_STATE,
// $JS.API.DIRECT.GET.OBJ_TEAMSTER_NATIVE_STATE (chunks) and
// $JS.API.DIRECT.GET.OBJ_TEAMSTER_NATIVE_STATE.> (metadata) only.
type NativeState struct {
	obs    jetstream.ObjectStore
	stream jetstream.Stream
}

// OpenNativeState opens TEAMSTER_NATIVE_STATE (Setup or Ensure created it).
func OpenNativeState(ctx context.Context, js jetstream.JetStream) (*NativeState, error) {
	obs, err := js.ObjectStore(ctx, BucketNativeState)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", BucketNativeState, err)
	}
	s, err := js.Stream(ctx, nativeStateStream)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", BucketNativeState, err)
	}
	return &NativeState{obs: obs, stream: s}, nil
}

// The stream behind TEAMSTER_NATIVE_STATE and its subjects, as nats.go's
// object store lays them out: an object's metadata (its ObjectInfo, JSON) is
// the last message on $O.<bucket>.M.<base64url(name)>, its content the
// messages (chunks) on $O.<bucket>.C.<nuid>, in order.
const (
	nativeStateStream     = "OBJ_" + BucketNativeState
	nativeStateMetaPrefix = "$O." + BucketNativeState + ".M."
	nativeStateChunks     = "$O." + BucketNativeState + ".C."
	objectDigestPrefix    = "SHA-256="
)

// chunkRetries bounds how many times Get reads a chunk its object's
// metadata names but the server did not find: with replicas, a direct get
// may be answered by a follower a little behind the one that answered the
// metadata.
const (
	chunkRetries    = 3
	chunkRetryPause = 100 * time.Millisecond
)

// ErrStateMissing is a session record naming native state that the object
// store does not hold.
var ErrStateMissing = errors.New("native state object not found")

// StateObjectName is the object that holds the native state a turn of the
// session with hash tag tag saved under fence.
func StateObjectName(tag, fence string) string {
	return tag + "." + strings.ReplaceAll(fence, ":", "-")
}

// Put stores blob as object name.
func (n *NativeState) Put(ctx context.Context, name string, blob []byte) error {
	if _, err := n.obs.PutBytes(ctx, name, blob); err != nil {
		return fmt.Errorf("native state %s: put: %w", name, err)
	}
	return nil
}

// Get reads object name, refusing one over max bytes before reading its
// content (0: no bound), and checks the content against the size and the
// SHA-256 digest its metadata records. ErrStateMissing when there is no such
// object (or it was deleted). It reads by direct get and creates no consumer.
func (n *NativeState) Get(ctx context.Context, name string, max int64) ([]byte, error) {
	info, err := n.info(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("native state %s: %w", name, err)
	}
	if max > 0 && info.Size > uint64(max) {
		return nil, fmt.Errorf("native state %s is %d bytes, over the limit of %d bytes", name, info.Size, max)
	}
	b, err := n.content(ctx, name, info)
	if err != nil {
		return nil, fmt.Errorf("native state %s: get: %w", name, err)
	}
	return b, nil
}

// info reads the metadata of object name: ErrStateMissing when there is
// none, or it marks the object deleted.
func (n *NativeState) info(ctx context.Context, name string) (*jetstream.ObjectInfo, error) {
	if name == "" {
		return nil, errors.New("no object name")
	}
	m, err := n.stream.GetLastMsgForSubject(ctx, nativeStateMetaPrefix+base64.URLEncoding.EncodeToString([]byte(name)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrStateMissing
	}
	if err != nil {
		return nil, err
	}
	info, err := decodeObjectInfo(m)
	if err != nil {
		return nil, err
	}
	if info.Deleted {
		return nil, ErrStateMissing
	}
	if info.Name != name {
		return nil, fmt.Errorf("its metadata names object %q", info.Name)
	}
	return info, nil
}

// decodeObjectInfo decodes the metadata message m; its time is the object's.
func decodeObjectInfo(m *jetstream.RawStreamMsg) (*jetstream.ObjectInfo, error) {
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return nil, fmt.Errorf("metadata does not decode: %w", err)
	}
	info.ModTime = m.Time
	return &info, nil
}

// content reads the chunks of the object info describes, one direct get
// ("the next message on the object's chunk subject from sequence") each,
// bounded by the size the metadata records, and checks size and digest.
func (n *NativeState) content(ctx context.Context, name string, info *jetstream.ObjectInfo) ([]byte, error) {
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, errors.New("the object is a link, which teamster never stores")
	}
	if !validNUID(info.NUID) {
		return nil, fmt.Errorf("metadata names chunk subject token %q", info.NUID)
	}
	want, err := decodeDigest(info.Digest)
	if err != nil {
		if info.Size == 0 && info.Chunks == 0 && info.Digest == "" {
			return []byte{}, nil // as the object store returns an empty object
		}
		return nil, err
	}
	subj := nativeStateChunks + info.NUID
	out := make([]byte, 0, min(info.Size, 16<<20))
	h := sha256.New()
	seq := uint64(1)
	for i := uint32(0); i < info.Chunks; i++ {
		m, err := n.chunk(ctx, name, info, subj, seq)
		if err != nil {
			return nil, fmt.Errorf("chunk %d of %d: %w", i+1, info.Chunks, err)
		}
		if uint64(len(out))+uint64(len(m.Data)) > info.Size {
			return nil, fmt.Errorf("chunks hold more than the %d bytes of its metadata", info.Size)
		}
		out = append(out, m.Data...)
		h.Write(m.Data)
		seq = m.Sequence + 1
	}
	if uint64(len(out)) != info.Size {
		return nil, fmt.Errorf("%d chunks hold %d bytes, its metadata says %d", info.Chunks, len(out), info.Size)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return nil, jetstream.ErrDigestMismatch
	}
	return out, nil
}

// chunk reads the first chunk on subj from sequence seq on. A chunk not
// found is read again (chunkRetries) unless the object is gone meanwhile
// (deleted: ErrStateMissing; put again under new chunks: an error).
func (n *NativeState) chunk(ctx context.Context, name string, info *jetstream.ObjectInfo, subj string, seq uint64) (*jetstream.RawStreamMsg, error) {
	for try := 1; ; try++ {
		m, err := n.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if err == nil {
			if m.Subject != subj {
				return nil, fmt.Errorf("read a message on %s", m.Subject)
			}
			return m, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, err
		}
		now, ierr := n.info(ctx, name)
		switch {
		case errors.Is(ierr, ErrStateMissing):
			return nil, ErrStateMissing
		case ierr != nil:
			return nil, err
		case now.NUID != info.NUID:
			return nil, errors.New("the object was put again while read")
		case try >= chunkRetries:
			return nil, errors.New("missing from the object store")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(chunkRetryPause):
		}
	}
}

// validNUID reports whether s can be the last token of a chunk subject: a
// NUID is base62, and anything else (a wildcard, a dot) would read other
// objects' chunks.
func validNUID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// decodeDigest decodes an object's digest, "SHA-256=<base64url of the sum>".
func decodeDigest(d string) ([]byte, error) {
	enc, ok := strings.CutPrefix(d, objectDigestPrefix)
	if !ok {
		return nil, fmt.Errorf("digest %q is not %s<base64url>", truncate(d, 80), objectDigestPrefix)
	}
	sum, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(enc, "="))
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("digest %q is not %s<base64url>", truncate(d, 80), objectDigestPrefix)
	}
	return sum, nil
}

// Delete removes object name; a missing object is not an error.
func (n *NativeState) Delete(ctx context.Context, name string) error {
	err := n.obs.Delete(ctx, name)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("native state %s: delete: %w", name, err)
	}
	return nil
}

// StateObject is one object of the native state store.
type StateObject struct {
	Name     string
	Size     uint64
	Modified time.Time
}

// List returns every object of the store (its metadata only, read once), in
// name order. Like Get it creates no consumer: the stream info lists the
// metadata subjects, a direct get reads each; deleted objects and metadata
// that does not decode are left out.
func (n *NativeState) List(ctx context.Context) ([]StateObject, error) {
	si, err := n.stream.Info(ctx, jetstream.WithSubjectFilter(nativeStateMetaPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("native state: list: %w", err)
	}
	var out []StateObject
	for subj := range si.State.Subjects {
		m, err := n.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("native state: list: %w", err)
		}
		info, err := decodeObjectInfo(m)
		if err != nil || info.Deleted {
			continue
		}
		out = append(out, StateObject{Name: info.Name, Size: info.Size, Modified: info.ModTime})
	}
	slices.SortFunc(out, func(a, b StateObject) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// StateObjectTag is the session hash tag an object name starts with
// (StateObjectName), "" when name is not one.
func StateObjectTag(name string) string {
	tag, _, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	return tag
}
