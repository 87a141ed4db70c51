package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/bus"
)

// Issue 27: workers and operators read JetStream without creating consumers.
// These tests run the reads as a user whose permissions deny
// $JS.API.CONSUMER.> and allow only the API subjects listed here, and whose
// inbox is _INBOX.worker.w1: what a worker's or operator's credentials allow.

// registryReadSubjects are the JetStream API subjects ReadRegistry and
// ReadRouters publish to.
var registryReadSubjects = []string{
	"$JS.API.STREAM.INFO.KV_" + bus.BucketWorkers,
	"$JS.API.DIRECT.GET.KV_" + bus.BucketWorkers + ".>",
	"$JS.API.STREAM.INFO.KV_" + bus.BucketRouters,
	"$JS.API.DIRECT.GET.KV_" + bus.BucketRouters + ".>",
}

// nativeStateReadSubjects are the JetStream API subjects OpenNativeState,
// NativeState.Get and NativeState.List publish to: the stream info, the
// direct get of an object's metadata (last message on its subject, named in
// the request subject) and of its chunks (a request body).
var nativeStateReadSubjects = []string{
	"$JS.API.STREAM.INFO.OBJ_" + bus.BucketNativeState,
	"$JS.API.DIRECT.GET.OBJ_" + bus.BucketNativeState,
	"$JS.API.DIRECT.GET.OBJ_" + bus.BucketNativeState + ".>",
}

const workerInbox = "_INBOX.worker.w1"

// restricted is the permissions of a principal that may publish to api only
// (never $JS.API.CONSUMER.>) and subscribe under its own inbox only.
func restricted(api ...[]string) *server.Permissions {
	var allow []string
	for _, a := range api {
		allow = append(allow, a...)
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow, Deny: []string{"$JS.API.CONSUMER.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{workerInbox + ".>"}},
	}
}

// startAuthNATS starts an embedded nats-server with JetStream whose users
// are "admin" (every permission) and users (name: permissions); a user's
// password is its name with "-pw". It returns the server's URL.
func startAuthNATS(t *testing.T, users map[string]*server.Permissions) string {
	t.Helper()
	opts := &server.Options{
		ServerName: "teamster-auth",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		MaxPayload: bus.ServerMaxPayload,
		NoSigs:     true,
		NoLog:      true,
		Users:      []*server.User{{Username: "admin", Password: "admin-pw"}},
	}
	for name, p := range users {
		opts.Users = append(opts.Users, &server.User{Username: name, Password: name + "-pw", Permissions: p})
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s.ClientURL()
}

// violations records the permission violations the server reports to a
// connection.
type violations struct {
	mu   sync.Mutex
	errs []error
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		v.mu.Lock()
		v.errs = append(v.errs, err)
		v.mu.Unlock()
	}
}

func (v *violations) list() []error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]error(nil), v.errs...)
}

// none fails t when the server reported a permission violation to nc.
func (v *violations) none(t *testing.T, nc *nats.Conn) {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if errs := v.list(); len(errs) > 0 {
		t.Fatalf("permission violations: %v", errs)
	}
}

// await waits until the server reported a permission violation to nc.
func (v *violations) await(t *testing.T) []error {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if errs := v.list(); len(errs) > 0 {
			return errs
		}
	}
	t.Fatal("no permission violation reported")
	return nil
}

// connectAs connects to url as user; a user other than admin uses the
// worker's inbox prefix.
func connectAs(t *testing.T, url, user string) (*nats.Conn, jetstream.JetStream, *violations) {
	t.Helper()
	v := &violations{}
	opts := []nats.Option{nats.UserInfo(user, user+"-pw"), nats.Name(t.Name() + "-" + user), nats.ErrorHandler(v.handler)}
	if user != "admin" {
		opts = append(opts, nats.CustomInboxPrefix(workerInbox))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, v
}

// oldReadBucket is readBucket as it was when it created a consumer (list the keys with
// an ordered consumer, get each), the reference the consumer-free read must
// equal.
func oldReadBucket[T any](ctx context.Context, js jetstream.JetStream, bucket string, validate func(*T) error) ([]T, error) {
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

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ReadRegistry and ReadRouters work for a user that may not create a
// consumer, and read what the consumer-based read read: the live keys in key
// order, without deleted or purged keys and entries that do not decode or
// validate, an empty list for an empty bucket, ErrBucketNotFound before
// set-up.
func TestReadRegistryReadOnly(t *testing.T) {
	url := startAuthNATS(t, map[string]*server.Permissions{"w1": restricted(registryReadSubjects)})
	_, admin, _ := connectAs(t, url, "admin")
	nc, js, v := connectAs(t, url, "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := bus.ReadRegistry(ctx, js); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("registry before set-up: %v, want ErrBucketNotFound", err)
	}
	if _, err := bus.ReadRouters(ctx, js); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("routers before set-up: %v, want ErrBucketNotFound", err)
	}
	workers, routers, err := bus.Setup(ctx, admin, bus.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}

	compare := func(step string) {
		t.Helper()
		got, err := bus.ReadRegistry(ctx, js)
		if err != nil {
			t.Fatalf("%s: ReadRegistry as w1: %v", step, err)
		}
		want, err := oldReadBucket(ctx, admin, bus.BucketWorkers, (*bus.WorkerEntry).Validate)
		if err != nil {
			t.Fatalf("%s: the old read: %v", step, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: ReadRegistry differs from the old read (-old +new):\n%s", step, diff)
		}
		gotR, err := bus.ReadRouters(ctx, js)
		if err != nil {
			t.Fatalf("%s: ReadRouters as w1: %v", step, err)
		}
		wantR, err := oldReadBucket(ctx, admin, bus.BucketRouters, (*bus.RouterEntry).Validate)
		if err != nil {
			t.Fatalf("%s: the old read: %v", step, err)
		}
		if diff := cmp.Diff(wantR, gotR); diff != "" {
			t.Fatalf("%s: ReadRouters differs from the old read (-old +new):\n%s", step, diff)
		}
		v.none(t, nc)
	}

	compare("empty buckets")
	if got, _ := bus.ReadRegistry(ctx, js); got == nil || len(got) != 0 {
		t.Fatalf("empty registry: %#v, want an empty list", got)
	}

	now := time.Now().UnixMilli()
	entry := func(id, state string) bus.WorkerEntry {
		return bus.WorkerEntry{V: bus.Version, WorkerID: id, State: state, Slots: 2, HeartbeatMs: now, StartedMs: now - 1000, Version: "test"}
	}
	put := func(kv jetstream.KeyValue, key string, value []byte) {
		t.Helper()
		if _, err := kv.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	// Out of key order, to show the read sorts.
	for _, id := range []string{"w-c", "w-a", "w-e", "w-b", "w-d", "w-f"} {
		put(workers, id, marshal(t, entry(id, bus.WorkerActive)))
	}
	put(workers, "w-bad", []byte("{not json"))
	put(workers, "w-invalid", marshal(t, entry("no spaces allowed", bus.WorkerActive)))
	put(workers, "w-state", marshal(t, entry("w-state", "sleeping")))
	for _, id := range []string{"r-2", "r-1", "r-3"} {
		put(routers, id, marshal(t, bus.RouterEntry{V: bus.Version, RouterID: id, PolicyDigest: "sha256:" + id, HeartbeatMs: now, StartedMs: now}))
	}
	put(routers, "r-bad", []byte(`{"v":1}`))
	compare("entries put")

	if err := workers.Delete(ctx, "w-b"); err != nil {
		t.Fatal(err)
	}
	if err := workers.Purge(ctx, "w-d"); err != nil {
		t.Fatal(err)
	}
	if err := routers.Delete(ctx, "r-2"); err != nil {
		t.Fatal(err)
	}
	put(workers, "w-e", marshal(t, entry("w-e", bus.WorkerDraining)))
	put(workers, "w-f", []byte("no longer json"))
	compare("keys deleted, purged and updated")

	put(workers, "w-b", marshal(t, entry("w-b", bus.WorkerStopped)))
	compare("a deleted key put again")

	got, err := bus.ReadRegistry(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var ids, states []string
	for _, e := range got {
		ids, states = append(ids, e.WorkerID), append(states, e.State)
	}
	if want := []string{"w-a", "w-b", "w-c", "w-e"}; !cmp.Equal(ids, want) {
		t.Fatalf("registry ids %q, want %q", ids, want)
	}
	if want := []string{bus.WorkerActive, bus.WorkerStopped, bus.WorkerActive, bus.WorkerDraining}; !cmp.Equal(states, want) {
		t.Fatalf("registry states %q, want %q", states, want)
	}
	gotR, err := bus.ReadRouters(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var rids []string
	for _, r := range gotR {
		rids = append(rids, r.RouterID)
	}
	if want := []string{"r-1", "r-3"}; !cmp.Equal(rids, want) {
		t.Fatalf("router ids %q, want %q", rids, want)
	}
	v.none(t, nc)
}

// The read-only user really cannot create a consumer: the read as it was
// when it created a consumer (an ordered consumer listing the keys) fails for it, and
// the server reports the denied CONSUMER.CREATE.
func TestReadOnlyUserCannotCreateConsumers(t *testing.T) {
	url := startAuthNATS(t, map[string]*server.Permissions{"w1": restricted(registryReadSubjects, nativeStateReadSubjects)})
	_, admin, _ := connectAs(t, url, "admin")
	_, js, v := connectAs(t, url, "w1")
	ctx := context.Background()
	workers, _, err := bus.Setup(ctx, admin, bus.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workers.Put(ctx, "w-a", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := oldReadBucket(short, js, bus.BucketWorkers, (*bus.WorkerEntry).Validate); err == nil {
		t.Fatal("the consumer-based read worked for a user that may not create consumers")
	}
	errs := v.await(t)
	t.Logf("denied as expected: %v", errs)
}
