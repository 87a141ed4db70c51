// Package natsproc runs a real NATS cluster on loopback: n nats-server
// processes (JetStream on file storage, clustered with routes, server names
// n1..nN, cluster name "teamster"), each of which a test or the chaos suite
// can kill with SIGKILL, pause, and start again on its ports and its store.
// The nats-server binary is the one of this module's go.mod, built once per
// process (see Binary). Nothing here fakes NATS.
package natsproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// ClusterName is the cluster name every node runs with.
const ClusterName = "teamster"

// EnvBinary names an environment variable that, when set, is the path of
// the nats-server binary to run instead of building the module's own.
const EnvBinary = "TEAMSTER_NATS_SERVER"

// startTimeout bounds how long a node may take to accept connections after
// its process started.
const startTimeout = 20 * time.Second

// Cluster is n nats-server processes routed to each other.
type Cluster struct {
	dir   string
	nodes []*Node
}

// Node is one nats-server process of a cluster. Its ports, config and store
// stay the same across restarts; its log (log.txt in its directory) is
// appended to by every start.
type Node struct {
	name    string
	idx     int
	bin     string
	dir     string
	port    int // clients
	cport   int // routes
	mport   int // HTTP monitoring (/healthz, /jsz)
	cfgPath string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartCluster starts an n-node cluster with its files under dir (one
// directory per node: config, log, JetStream store) and waits until every
// node accepts client connections. It does not wait for JetStream: call
// WaitReady before creating streams. With n = 1 the node runs JetStream
// without clustering.
func StartCluster(dir string, n int) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("natsproc: a cluster needs at least one node, not %d", n)
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	// A port that was free when picked can be taken before the server binds
	// it: start again on fresh ports a few times.
	for try := 0; ; try++ {
		c, err := startOnce(dir, n, bin, try)
		if err == nil {
			return c, nil
		}
		if try == 2 || !errors.Is(err, errBind) {
			return nil, err
		}
	}
}

// errBind marks a start that failed because a port was taken.
var errBind = errors.New("a port was taken")

func startOnce(dir string, n int, bin string, try int) (*Cluster, error) {
	c := &Cluster{dir: dir}
	for i := 0; i < n; i++ {
		nd := &Node{name: "n" + strconv.Itoa(i+1), idx: i, bin: bin}
		nd.dir = filepath.Join(dir, nd.name)
		if try > 0 {
			nd.dir = filepath.Join(dir, fmt.Sprintf("%s-try%d", nd.name, try))
		}
		for _, p := range []*int{&nd.port, &nd.cport, &nd.mport} {
			port, err := redisproc.FreePort()
			if err != nil {
				return nil, err
			}
			*p = port
		}
		if err := os.MkdirAll(filepath.Join(nd.dir, "jetstream"), 0o755); err != nil {
			return nil, err
		}
		nd.cfgPath = filepath.Join(nd.dir, "nats.conf")
		nd.logPath = filepath.Join(nd.dir, "log.txt")
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := os.WriteFile(nd.cfgPath, []byte(c.config(nd)), 0o644); err != nil {
			return nil, err
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range c.nodes {
		wg.Go(func() { errs[i] = nd.Start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// config is nd's configuration file.
func (c *Cluster) config(nd *Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\n", nd.name)
	fmt.Fprintf(&b, "host: \"127.0.0.1\"\nport: %d\n", nd.port)
	fmt.Fprintf(&b, "http: \"127.0.0.1:%d\"\n", nd.mport)
	// As teamster's servers run (bus.ServerMaxPayload): bodies over the
	// 1 MiB contract limit reach the router, which refuses them itself.
	fmt.Fprintf(&b, "max_payload: %d\nmax_pending: %d\n", bus.ServerMaxPayload, 64<<20)
	b.WriteString("logtime: true\n")
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", filepath.Join(nd.dir, "jetstream"))
	if len(c.nodes) > 1 {
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  host: \"127.0.0.1\"\n  port: %d\n  routes: [\n", ClusterName, nd.cport)
		for _, o := range c.nodes {
			if o != nd {
				fmt.Fprintf(&b, "    \"nats-route://127.0.0.1:%d\"\n", o.cport)
			}
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// URLs is the comma-separated nats:// URLs of every node, what a client
// connects with (nats.Connect takes such a list).
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = nd.URL()
	}
	return strings.Join(urls, ",")
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Node is node i (0-based; its server name is n<i+1>).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Nodes are all the nodes, in order.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Index is the index of the node whose server name is name, -1 when none.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// Close kills every node and waits for it to exit. The files stay in dir.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		wg.Go(func() { _ = nd.Kill() })
	}
	wg.Wait()
}

// WaitReady waits until every node runs and answers its /healthz with 200:
// it is in contact with a JetStream meta leader, current with it, and every
// stream and consumer replica placed on it is current. It fails at once
// when a node is not running (a killed node is started with Start or
// Restart first). After a restart it says the node has caught up.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for _, nd := range c.nodes {
		if !nd.Running() {
			return fmt.Errorf("natsproc: %s is not running", nd.name)
		}
	}
	for _, nd := range c.nodes {
		if err := nd.WaitHealthy(ctx); err != nil {
			return err
		}
	}
	return nil
}

// poll runs op until it succeeds, fails permanently (backoff.Permanent) or
// ctx ends, at most 250 ms apart. On ctx's end it returns op's last error
// with ctx's.
func poll(ctx context.Context, op func() error) error {
	var last error
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(20*time.Millisecond),
		backoff.WithMaxInterval(250*time.Millisecond), backoff.WithMaxElapsedTime(0))
	err := backoff.Retry(func() error {
		last = op()
		return last
	}, backoff.WithContext(bo, ctx))
	if err != nil && ctx.Err() != nil && last != nil && !errors.Is(last, ctx.Err()) {
		return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
	}
	return err
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return b
}
