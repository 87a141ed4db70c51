package bus

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"
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

// readBucket reads every entry of a registry bucket, in key order, without
// creating a consumer (only routers create consumers): the stream
// info of KV_<bucket> lists the subjects that hold a message, and a direct get
// reads the last message of each. Delete and purge markers, and entries that
// do not decode or validate, are skipped. The reader needs
// $JS.API.STREAM.INFO.KV_<bucket> and $JS.API.DIRECT.GET.KV_<bucket>.> only
// (the registry buckets allow direct gets: registryBucket).
func readBucket[T any](ctx context.Context, js jetstream.JetStream, bucket string, validate func(*T) error) ([]T, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, jetstream.ErrBucketNotFound
	}
	if err != nil {
		return nil, err
	}
	prefix := "$KV." + bucket + "."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if strings.HasPrefix(subj, prefix) && len(subj) > len(prefix) {
			subjects = append(subjects, subj)
		}
	}
	sort.Strings(subjects) // one prefix: the keys' order
	out := []T{}
	for _, subj := range subjects {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // expired or purged since the stream info
			}
			return nil, err
		}
		if kvRemoved(m.Header) {
			continue
		}
		var v T
		if json.Unmarshal(m.Data, &v) != nil || validate(&v) != nil {
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

// kvRemoved reports whether a key's last message says it has no value, as
// KeyValue.Get tells it: a delete or purge marker (KV-Operation DEL or
// PURGE), or a marker the server left when it removed the key's message
// (Nats-Marker-Reason MaxAge, Purge or Remove).
func kvRemoved(h nats.Header) bool {
	if op := h.Get("KV-Operation"); op != "" {
		return op == "DEL" || op == "PURGE"
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
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
