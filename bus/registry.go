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
	kv, err := js.KeyValue(ctx, BucketWorkers)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []WorkerEntry
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return nil, err
		}
		var w WorkerEntry
		if json.Unmarshal(e.Value(), &w) != nil || w.Validate() != nil {
			continue
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].WorkerID < out[j].WorkerID })
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
