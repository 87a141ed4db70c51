package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/leases"
)

// Snapshots of the fleet's state (Redis and the streams) around hostile requests.

// fleetState is what the catalogue must not change.
type fleetState struct {
	Redis   map[string]string
	Expiry  map[string]time.Time // keys with a TTL, except leases
	Streams map[string]string    // stream: messages and last sequence
}

func (hf *hostileFleet) snapshot(t *testing.T) fleetState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := fleetState{Redis: map[string]string{}, Expiry: map[string]time.Time{}, Streams: map[string]string{}}
	rdb := hf.f.RDB
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	now := time.Now()
	for _, k := range keys {
		if leases.IsNodeKey(k) {
			// The routers' node markers (one per hash slot): no request
			// writes them, and reading 16,384 of them would stretch the
			// snapshot past the expiry tolerance.
			continue
		}
		v, ttl, err := redisValue(ctx, rdb, k)
		if errors.Is(err, redis.Nil) {
			continue // gone between KEYS and the read (a lease expiring)
		}
		if err != nil {
			t.Fatalf("snapshot %s: %v", k, err)
		}
		st.Redis[k] = v
		if ttl > 0 && !strings.HasSuffix(k, ":lease") {
			st.Expiry[k] = now.Add(ttl)
		}
	}
	for _, name := range []string{bus.StreamAttempts, bus.StreamResults} {
		s, err := hf.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("snapshot %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("snapshot %s: %v", name, err)
		}
		st.Streams[name] = fmt.Sprintf("msgs=%d lastSeq=%d", info.State.Msgs, info.State.LastSeq)
	}
	return st
}

// redisValue renders a key's value; see the comment at the top of
// hostile_test.go for what it leaves out.
func redisValue(ctx context.Context, rdb *redis.Client, k string) (string, time.Duration, error) {
	typ, err := rdb.Type(ctx, k).Result()
	if err != nil {
		return "", 0, err
	}
	var v string
	switch typ {
	case "none":
		return "", 0, redis.Nil
	case "string":
		v, err = rdb.Get(ctx, k).Result()
	case "hash":
		var m map[string]string
		m, err = rdb.HGetAll(ctx, k).Result()
		if strings.Contains(k, ":attempt:") {
			delete(m, "seqmax")
		}
		fields := make([]string, 0, len(m))
		for f, x := range m {
			fields = append(fields, f+"="+x)
		}
		sort.Strings(fields)
		v = "hash{" + strings.Join(fields, ", ") + "}"
	case "list":
		var l []string
		l, err = rdb.LRange(ctx, k, 0, -1).Result()
		v = fmt.Sprintf("list%q", l)
	case "set":
		var l []string
		l, err = rdb.SMembers(ctx, k).Result()
		sort.Strings(l)
		v = fmt.Sprintf("set%q", l)
	case "zset":
		var zs []redis.Z
		zs, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		var ms []string
		for _, z := range zs {
			m := fmt.Sprint(z.Member)
			if !leases.IsIndexKey(k) {
				m += "@" + strconv.FormatFloat(z.Score, 'f', -1, 64)
			}
			ms = append(ms, m)
		}
		sort.Strings(ms)
		v = fmt.Sprintf("zset%q", ms)
	default:
		v = "type " + typ
	}
	if err != nil {
		return "", 0, err
	}
	ttl, err := rdb.PTTL(ctx, k).Result()
	if err != nil {
		return "", 0, err
	}
	if ttl > 0 {
		v += " (expires)"
	}
	return v, ttl, nil
}

// diff describes how after differs from s; "" when it does not. Expiry
// times may move by up to a second (they are computed from remaining TTLs).
func (s fleetState) diff(after fleetState) string {
	d := cmp.Diff(s.Redis, after.Redis) + cmp.Diff(s.Streams, after.Streams)
	for k, at := range s.Expiry {
		if bt, ok := after.Expiry[k]; ok && (bt.Sub(at) > time.Second || at.Sub(bt) > time.Second) {
			d += fmt.Sprintf("expiry of %s moved from %s to %s\n", k, at.Format(time.RFC3339Nano), bt.Format(time.RFC3339Nano))
		}
	}
	return d
}
