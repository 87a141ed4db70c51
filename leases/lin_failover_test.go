package leases

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// linNodes is the Redis a linearizability round runs against: one
// redis-server, or a primary and a replica of it for a round with a
// failover. The faults act on the node the clients use now (cur).
type linNodes struct {
	cur *redisproc.Redis
	// replica replicates cur (REPLICAOF) until the detach, and is the
	// node the clients go to at the promote; nil on a single node.
	replica *redisproc.Redis
	// detached says the replica no longer replicates: a promote is due.
	detached bool
	// addr is where the store's client connects, when it is the nodes'
	// (store); promote switches it to the replica.
	addr atomic.Pointer[string]
	// dirs are the nodes' directories (their logs), by address.
	dirs map[string]string
}

// singleLinNode is one redis-server, for the rounds without a failover.
func singleLinNode(r *redisproc.Redis) *linNodes { return &linNodes{cur: r} }

// linPause bounds the detach's CLIENT PAUSE (Redis ends it on its own after
// this): well within go-redis's read timeout (3 s), so that a request the
// pause holds runs while its client still waits for the reply.
const linPause = time.Second

// newLinReplicated starts a primary and a replica that has every write of
// it. Both are killed when the test ends; the store's client connects
// through a dialer that the promote switches, as a Sentinel-aware client or
// a DNS switch would.
func newLinReplicated(t *testing.T) *linNodes {
	t.Helper()
	n := &linNodes{dirs: map[string]string{}}
	for _, r := range []**redisproc.Redis{&n.cur, &n.replica} {
		dir := t.TempDir()
		var err error
		if *r, err = redisproc.Start(dir); err != nil {
			t.Fatal(err)
		}
		node := *r
		n.dirs[node.Addr()] = dir
		t.Cleanup(func() { _ = node.Kill() })
	}
	addr := n.cur.Addr()
	n.addr.Store(&addr)
	pc, rc := n.cur.Client(), n.replica.Client()
	defer pc.Close()
	defer rc.Close()
	// The first full sync starts at once, not after the diskless sync's
	// 5 s wait for more replicas.
	if err := pc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(n.cur.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, perr := replState(pc)
		r, rerr := replState(rc)
		if perr == nil && rerr == nil && r.linkUp && p.id == r.id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync with the primary: %+v %v, %+v %v%s", p, perr, r, rerr, n.logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// After a diskless full sync the primary streams its writes only once
	// the replica's first REPLCONF ACK came (up to a second later): wait
	// until a write (to a key of no session) has reached the replica.
	if err := pc.Incr(ctx, keyRoot+"lin-replicated").Err(); err != nil {
		t.Fatal(err)
	}
	n.streaming(t, pc, rc, 10*time.Second)
	return n
}

// streaming waits until the replica has applied every write the primary
// had made when it was called: the primary streams to it.
func (n *linNodes) streaming(t *testing.T, pc, rc *redis.Client, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	want, err := replState(pc)
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := replState(rc)
		if err == nil && r.linkUp && r.id == want.id && r.offset >= want.offset {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica is not streaming from the primary: %+v, %+v %v%s", want, r, err, n.logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// store is a store whose client connects to the nodes' current address.
func (n *linNodes) store(t *testing.T) *Store {
	t.Helper()
	o := linClientOptions()
	o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, *n.addr.Load())
	}
	return linStore(t, o)
}

// check says why faults cannot be injected into n, nil when they can.
func (n *linNodes) check(faults []linFault) error {
	replica, detached := n.replica != nil, n.detached
	for _, f := range faults {
		switch {
		case f == faultDetach && (!replica || detached):
			return errors.New("a detach needs a replica that replicates")
		case f == faultPromote && !detached:
			return errors.New("a promote needs a detach first")
		case f == faultRestart && replica && !detached:
			// The replica would resync from the empty primary in its own
			// time: the model has no instant at which it loses its data.
			return errors.New("no restart of a primary with a replica attached")
		case f == faultDetach:
			detached = true
		case f == faultPromote:
			replica, detached = false, false
		}
	}
	return nil
}

// kill kills both nodes (a round's own, once the round is over).
func (n *linNodes) kill() {
	for _, r := range []*redisproc.Redis{n.cur, n.replica} {
		if r != nil {
			_ = r.Kill()
		}
	}
}

// flush is FLUSHALL on the current node (replicated to an attached
// replica).
func (n *linNodes) flush(t *testing.T) {
	t.Helper()
	c := n.cur.Client()
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
}

// restart stops the current node and starts it again, empty; down for a
// moment, so that requests meet a dead server.
func (n *linNodes) restart(t *testing.T) {
	t.Helper()
	if err := n.cur.Stop(); err != nil {
		t.Fatalf("stop redis: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := n.cur.Start(); err != nil {
		t.Fatalf("start redis: %v", err)
	}
}

// detach makes the replica an exact copy of the primary at one instant and
// ends its replication. CLIENT PAUSE WRITE holds every write (every script)
// sent to the primary from then on; once the replica's replication offset
// is the primary's (same replication id), it has every write the primary
// made, and REPLICAOF NO ONE ends its replication; then the primary goes on.
// The pause's start is the detach's linearization point: a write that ran
// before it is in the copy, one held by it runs on the primary only, after
// it. The replica takes a new replication id: it is another node now.
func (n *linNodes) detach(t *testing.T) {
	t.Helper()
	pc, rc := n.cur.Client(), n.replica.Client()
	defer pc.Close()
	defer rc.Close()
	// Unpaused, until the replica is close behind, so that the pause need
	// only wait for the last writes.
	n.streaming(t, pc, rc, 5*time.Second)
	if err := pc.Do(ctx, "CLIENT", "PAUSE", linPause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatalf("pause the primary's writes: %v", err)
	}
	paused := time.Now()
	for {
		p, perr := replState(pc)
		r, rerr := replState(rc)
		if perr == nil && rerr == nil && p.id == r.id && p.offset == r.offset {
			break
		}
		if time.Since(paused) > linPause/2 {
			t.Fatalf("the replica did not catch up with the paused primary: %+v %v, %+v %v%s", p, perr, r, rerr, n.logs())
		}
		time.Sleep(time.Millisecond)
	}
	if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatalf("detach the replica: %v", err)
	}
	// Were the pause over already, a write could have reached the replica
	// after the copy was taken.
	if d := time.Since(paused); d > linPause*3/4 {
		t.Fatalf("the detach took %s, near the pause's end", d)
	}
	if err := pc.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatalf("unpause the primary: %v", err)
	}
	n.detached = true
}

// promote kills the primary (SIGKILL: what it acknowledged after the detach
// is lost) and points the clients at the replica. A request sent before the
// switch reached the primary before it died, or failed; one sent after it
// reaches the promoted replica.
func (n *linNodes) promote(t *testing.T) {
	t.Helper()
	if err := n.cur.Kill(); err != nil {
		t.Fatalf("kill the primary: %v", err)
	}
	addr := n.replica.Addr()
	n.addr.Store(&addr)
	n.cur, n.replica, n.detached = n.replica, nil, false
}

// logs is the end of the nodes' logs, for a failure's message.
func (n *linNodes) logs() string {
	var b strings.Builder
	for _, r := range []*redisproc.Redis{n.cur, n.replica} {
		if r == nil || n.dirs[r.Addr()] == "" {
			continue
		}
		log, _ := os.ReadFile(filepath.Join(n.dirs[r.Addr()], fmt.Sprintf("redis-%d.log", r.Port())))
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		fmt.Fprintf(&b, "\n%s's log:\n%s", r.Addr(), log)
	}
	return b.String()
}

// replInfo is what a node's INFO replication says of its replication.
type replInfo struct {
	id     string // master_replid
	offset int64  // master_repl_offset: on a replica, what it has applied
	linkUp bool   // a replica: master_link_status is up
}

func replState(c *redis.Client) (replInfo, error) {
	txt, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return replInfo{}, err
	}
	var r replInfo
	found := 0
	for _, line := range strings.Split(txt, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "master_replid":
			r.id = v
			found++
		case "master_repl_offset":
			if r.offset, err = strconv.ParseInt(v, 10, 64); err != nil {
				return r, fmt.Errorf("master_repl_offset %q: %w", v, err)
			}
			found++
		case "master_link_status":
			r.linkUp = v == "up"
		}
	}
	if found != 2 {
		return r, fmt.Errorf("INFO replication without master_replid and master_repl_offset: %q", txt)
	}
	return r, nil
}
