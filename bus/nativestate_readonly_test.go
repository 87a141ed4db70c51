package bus_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/bus"
)

// nativeStateWriteSubjects are what NativeState.Put and Delete publish to
// besides the reads: the object's chunk and metadata subjects, and the purge
// of an object's chunks (Delete, and Put replacing an object).
var nativeStateWriteSubjects = []string{
	"$O." + bus.BucketNativeState + ".>",
	"$JS.API.STREAM.PURGE.OBJ_" + bus.BucketNativeState,
}

// randomBlob is n bytes that do not compress.
func randomBlob(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// oldGet is NativeState.Get as it was when it created a consumer (the object store's
// Get, an ordered consumer over the chunks), the reference the direct-get
// read must equal.
func oldGet(ctx context.Context, js jetstream.JetStream, name string) ([]byte, error) {
	obs, err := js.ObjectStore(ctx, bus.BucketNativeState)
	if err != nil {
		return nil, err
	}
	res, err := obs.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return io.ReadAll(res)
}

// putMeta publishes metadata for object name as the object store lays it
// out, to forge a corrupt object.
func putMeta(t *testing.T, nc *nats.Conn, info jetstream.ObjectInfo) {
	t.Helper()
	m := nats.NewMsg("$O." + bus.BucketNativeState + ".M." + base64.URLEncoding.EncodeToString([]byte(info.Name)))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data = marshal(t, info)
	if _, err := nc.Request(m.Subject, m.Data, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// NativeState.Get and List work for a user that may not create a consumer
// (direct gets only) and read what the object store's consumer-based reads
// read: objects of several chunks, of exactly one, small and empty ones, a
// replaced one; a deleted or never stored object is ErrStateMissing, one over
// the bound is refused.
func TestNativeStateGetReadOnly(t *testing.T) {
	url := startAuthNATS(t, map[string]*server.Permissions{"w1": restricted(nativeStateReadSubjects)})
	_, admin, _ := connectAs(t, url, "admin")
	nc, js, v := connectAs(t, url, "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := bus.Setup(ctx, admin, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := bus.OpenNativeState(ctx, admin) // writes as the admin
	if err != nil {
		t.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		t.Fatalf("open as w1: %v", err)
	}
	if objs, err := st.List(ctx); err != nil || len(objs) != 0 {
		t.Fatalf("list of an empty store: %v (%v), want none", objs, err)
	}

	objects := map[string][]byte{
		"tag1.big":      randomBlob(300<<10, 1), // three chunks of 128 KiB and less
		"tag1.onechunk": randomBlob(128<<10, 2),
		"tag2.text":     bytes.Repeat([]byte("transcript line\n"), 40_000),
		"tag2.small":    []byte(`{"type":"message","text":"hello"}`),
		"tag3.empty":    {},
		"tag3.replaced": randomBlob(200<<10, 3),
	}
	for name, blob := range objects {
		if err := w.Put(ctx, name, blob); err != nil {
			t.Fatal(err)
		}
	}
	objects["tag3.replaced"] = []byte("the second version")
	if err := w.Put(ctx, "tag3.replaced", objects["tag3.replaced"]); err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, "tag4.deleted", randomBlob(150<<10, 4)); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "tag4.deleted"); err != nil {
		t.Fatal(err)
	}

	for name, blob := range objects {
		got, err := st.Get(ctx, name, int64(len(blob)))
		if err != nil {
			t.Fatalf("get %s as w1: %v", name, err)
		}
		if !bytes.Equal(got, blob) {
			t.Fatalf("get %s: %d bytes, not the %d put", name, len(got), len(blob))
		}
		old, err := oldGet(ctx, admin, name)
		if err != nil {
			t.Fatalf("old get %s: %v", name, err)
		}
		if !bytes.Equal(got, old) || (got == nil) != (old == nil) {
			t.Fatalf("get %s: %d bytes, the old get %d", name, len(got), len(old))
		}
		if len(blob) > 0 {
			if _, err := st.Get(ctx, name, int64(len(blob))-1); err == nil || !strings.Contains(err.Error(), "over the limit") {
				t.Fatalf("get %s over the bound: %v", name, err)
			}
		}
	}
	for _, name := range []string{"tag4.deleted", "tag5.never"} {
		if _, err := st.Get(ctx, name, 0); !errors.Is(err, bus.ErrStateMissing) {
			t.Fatalf("get %s: %v, want ErrStateMissing", name, err)
		}
		if _, err := oldGet(ctx, admin, name); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatalf("old get %s: %v, want ErrObjectNotFound", name, err)
		}
	}

	// List: what the object store's list (a watcher) returns, in name order.
	got, err := st.List(ctx)
	if err != nil {
		t.Fatalf("list as w1: %v", err)
	}
	obs, err := admin.ObjectStore(ctx, bus.BucketNativeState)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []bus.StateObject
	for _, i := range infos {
		want = append(want, bus.StateObject{Name: i.Name, Size: i.Size, Modified: i.ModTime})
	}
	slices.SortFunc(want, func(a, b bus.StateObject) int { return strings.Compare(a.Name, b.Name) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("List differs from the object store's (-old +new):\n%s", diff)
	}
	if len(got) != len(objects) {
		t.Fatalf("listed %d objects, want the %d stored", len(got), len(objects))
	}
	v.none(t, nc)
}

// Get checks an object against its metadata: a digest or size that does not
// match the chunks, a chunk subject token that is not one (a wildcard would
// read other objects' chunks), a link, all fail without reading anything
// else. Forged by publishing metadata as the object store lays it out.
func TestNativeStateGetChecksMetadata(t *testing.T) {
	url := startAuthNATS(t, map[string]*server.Permissions{"w1": restricted(nativeStateReadSubjects)})
	adminNC, admin, _ := connectAs(t, url, "admin")
	nc, js, v := connectAs(t, url, "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := bus.Setup(ctx, admin, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	obs, err := admin.ObjectStore(ctx, bus.BucketNativeState)
	if err != nil {
		t.Fatal(err)
	}
	blob := randomBlob(200<<10, 5)
	good, err := obs.PutBytes(ctx, "tag.good", blob)
	if err != nil {
		t.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	forged := func(name string, change func(*jetstream.ObjectInfo)) {
		i := *good
		i.Name = name
		i.ModTime = time.Time{}
		change(&i)
		putMeta(t, adminNC, i)
	}
	other := sha256.Sum256([]byte("something else"))
	forged("tag.digest", func(i *jetstream.ObjectInfo) { i.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(other[:]) })
	forged("tag.baddigest", func(i *jetstream.ObjectInfo) { i.Digest = "MD5=abc" })
	forged("tag.bigger", func(i *jetstream.ObjectInfo) { i.Size++ })
	forged("tag.smaller", func(i *jetstream.ObjectInfo) { i.Size-- })
	forged("tag.morechunks", func(i *jetstream.ObjectInfo) { i.Chunks++ })
	forged("tag.wildcard", func(i *jetstream.ObjectInfo) { i.NUID = ">" })
	forged("tag.link", func(i *jetstream.ObjectInfo) {
		i.Opts = &jetstream.ObjectMetaOptions{Link: &jetstream.ObjectLink{Bucket: bus.BucketNativeState, Name: "tag.good"}}
	})
	forged("tag.deleted", func(i *jetstream.ObjectInfo) { i.Deleted = true })

	if b, err := st.Get(ctx, "tag.good", 0); err != nil || !bytes.Equal(b, blob) {
		t.Fatalf("get tag.good: %d bytes (%v)", len(b), err)
	}
	for name, want := range map[string]string{
		"tag.digest":     jetstream.ErrDigestMismatch.Error(),
		"tag.baddigest":  "is not SHA-256=",
		"tag.bigger":     "its metadata says",
		"tag.smaller":    "more than the",
		"tag.morechunks": "chunk 3 of 3", // the chunks run out
		"tag.wildcard":   "chunk subject token",
		"tag.link":       "link",
	} {
		b, err := st.Get(ctx, name, 0)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("get %s: %d bytes, error %v, want one saying %q", name, len(b), err, want)
		}
		if errors.Is(err, bus.ErrStateMissing) {
			t.Fatalf("get %s: %v is ErrStateMissing", name, err)
		}
	}
	if _, err := st.Get(ctx, "tag.deleted", 0); !errors.Is(err, bus.ErrStateMissing) {
		t.Fatalf("get tag.deleted: %v, want ErrStateMissing", err)
	}
	v.none(t, nc)
}

// Get refuses an object over its bound from the metadata alone: a user that
// may read metadata but no chunk ($JS.API.DIRECT.GET.OBJ_… with a request
// body) gets "over the limit", without a permission violation, while a read
// within the bound needs the chunks and is denied.
func TestNativeStateGetRefusesBeforeChunks(t *testing.T) {
	url := startAuthNATS(t, map[string]*server.Permissions{"m1": restricted([]string{
		"$JS.API.STREAM.INFO.OBJ_" + bus.BucketNativeState,
		"$JS.API.DIRECT.GET.OBJ_" + bus.BucketNativeState + ".>",
	})})
	_, admin, _ := connectAs(t, url, "admin")
	nc, js, v := connectAs(t, url, "m1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := bus.Setup(ctx, admin, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := bus.OpenNativeState(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	blob := randomBlob(300<<10, 6)
	if err := w.Put(ctx, "tag.big", blob); err != nil {
		t.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "tag.big", int64(len(blob))-1); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("get over the bound: %v", err)
	}
	if _, err := st.Get(ctx, "tag.none", 10); !errors.Is(err, bus.ErrStateMissing) {
		t.Fatalf("get of a missing object: %v, want ErrStateMissing", err)
	}
	v.none(t, nc)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := st.Get(short, "tag.big", int64(len(blob))); err == nil {
		t.Fatal("read the chunks without the permission to")
	}
	for _, err := range v.await(t) {
		if !strings.Contains(err.Error(), `"$JS.API.DIRECT.GET.OBJ_`+bus.BucketNativeState+`"`) {
			t.Fatalf("violation %v, want one on the chunks' direct get", err)
		}
	}
}

// What a worker's Put and Delete need besides the reads
// (nativeStateWriteSubjects), still without creating a consumer.
func TestNativeStatePutDeleteRestricted(t *testing.T) {
	url := startAuthNATS(t, map[string]*server.Permissions{"w1": restricted(nativeStateReadSubjects, nativeStateWriteSubjects)})
	_, admin, _ := connectAs(t, url, "admin")
	nc, js, v := connectAs(t, url, "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := bus.Setup(ctx, admin, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := bus.OpenNativeState(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	first, second := randomBlob(300<<10, 7), randomBlob(10, 8)
	if err := st.Put(ctx, "tag.obj", first); err != nil {
		t.Fatalf("put as w1: %v", err)
	}
	if err := st.Put(ctx, "tag.obj", second); err != nil { // purges the first's chunks
		t.Fatalf("put again as w1: %v", err)
	}
	if b, err := st.Get(ctx, "tag.obj", 0); err != nil || !bytes.Equal(b, second) {
		t.Fatalf("get: %d bytes (%v), want the second put's %d", len(b), err, len(second))
	}
	if err := st.Delete(ctx, "tag.obj"); err != nil {
		t.Fatalf("delete as w1: %v", err)
	}
	if _, err := st.Get(ctx, "tag.obj", 0); !errors.Is(err, bus.ErrStateMissing) {
		t.Fatalf("get after delete: %v, want ErrStateMissing", err)
	}
	if err := st.Delete(ctx, "tag.obj"); err != nil {
		t.Fatalf("delete of a deleted object: %v", err)
	}
	v.none(t, nc)
	s, err := admin.Stream(ctx, "OBJ_"+bus.BucketNativeState)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("the stream holds %d messages, want the deleted object's metadata only", n)
	}
}
