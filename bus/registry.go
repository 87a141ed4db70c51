package bus

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/selection"
)

// ReadRegistry returns the entries of KV TEAMSTER_WORKERS, sorted by worker id.
// Entries that do not decode are skipped.
func ReadRegistry(ctx context.Context, js jetstream.JetStream) ([]WorkerEntry, error) {
	return readBucket(ctx, js, BucketWorkers, (*WorkerEntry).Validate)
}

// ReadRouters returns the entries of KV TEAMSTER_ROUTERS, sorted by router id.
// Entries that do not decode are skipped.
func ReadRouters(ctx context.Context, js jetstream.JetStream) ([]RouterEntry, error) {
	return readBucket(ctx, js, BucketRouters, (*RouterEntry).Validate)
}

// readBucket reads every entry of a registry bucket, in key order.
func readBucket[T any](ctx context.Context, js jetstream.JetStream, bucket string, validate func(*T) error) ([]T, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for key := range lister.Keys() {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	out := []T{}
	for _, key := range keys {
		e, err := kv.Get(ctx, key)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return nil, err
		}
		var v T
		if json.Unmarshal(e.Value(), &v) != nil || validate(&v) != nil {
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

// LiveManifests returns the manifests the live (active or draining) entries
// advertise.
func LiveManifests(entries []WorkerEntry) []selection.Manifest {
	var out []selection.Manifest
	for _, e := range entries {
		if e.Live() {
			out = append(out, e.Harnesses...)
		}
	}
	return out
}
