package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// ensureNativeState opens TEAMSTER_NATIVE_STATE, creating it when missing
// (what a worker does; routers create or update it in Setup).
func ensureNativeState(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, BucketNativeState)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, nativeStateBucketConfig(o))
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = js.ObjectStore(ctx, BucketNativeState)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", BucketNativeState, err)
	}
	return obs, nil
}

// NativeState is the object store of sessions' native state.
type NativeState struct {
	obs jetstream.ObjectStore
}

// OpenNativeState opens TEAMSTER_NATIVE_STATE (Setup or Ensure created it).
func OpenNativeState(ctx context.Context, js jetstream.JetStream) (*NativeState, error) {
	obs, err := js.ObjectStore(ctx, BucketNativeState)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", BucketNativeState, err)
	}
	return &NativeState{obs: obs}, nil
}

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
// content (0: no bound). The object store checks the content's SHA-256
// digest as it is read. ErrStateMissing when there is no such object.
func (n *NativeState) Get(ctx context.Context, name string, max int64) ([]byte, error) {
	res, err := n.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("native state %s: %w", name, ErrStateMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("native state %s: %w", name, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return nil, fmt.Errorf("native state %s: %w", name, err)
	}
	if max > 0 && int64(info.Size) > max {
		return nil, fmt.Errorf("native state %s is %d bytes, over the limit of %d bytes", name, info.Size, max)
	}
	b, err := io.ReadAll(res)
	if err != nil {
		return nil, fmt.Errorf("native state %s: get: %w", name, err)
	}
	return b, nil
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

// List returns every object of the store (its metadata only, read once).
func (n *NativeState) List(ctx context.Context) ([]StateObject, error) {
	infos, err := n.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("native state: list: %w", err)
	}
	out := make([]StateObject, 0, len(infos))
	for _, i := range infos {
		out = append(out, StateObject{Name: i.Name, Size: i.Size, Modified: i.ModTime})
	}
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
