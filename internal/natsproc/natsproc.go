// Package natsproc runs a real NATS cluster on loopback: n nats-server
// processes (JetStream on file storage, clustered with routes, server names
// n1..nN, cluster name "teamster"), each of which a test or the chaos suite
// can kill with SIGKILL, pause, and start again on its ports and its store.
// The nats-server binary is the one of this module's go.mod, built once per
// process (see Binary). Nothing here fakes NATS.
package natsproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// StreamLeader is the index of the node leading stream, as JetStream's
// stream info reports it (Cluster.Leader, a server name). While the stream
// has no leader (an election), or the one reported is not running, it asks
// again until ctx ends.
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (int, error) {
	return c.leader(ctx, "stream "+stream, func(ctx context.Context, js jetstream.JetStream) (*jetstream.ClusterInfo, error) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		return s.CachedInfo().Cluster, nil
	})
}

// ConsumerLeader is StreamLeader for a consumer of stream (a durable
// consumer has a leader of its own, which need not be the stream's).
func (c *Cluster) ConsumerLeader(ctx context.Context, stream, consumer string) (int, error) {
	return c.leader(ctx, "consumer "+stream+" > "+consumer, func(ctx context.Context, js jetstream.JetStream) (*jetstream.ClusterInfo, error) {
		cons, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return nil, err
		}
		return cons.CachedInfo().Cluster, nil
	})
}

// leader asks info for the cluster info of what until it names a running
// node.
func (c *Cluster) leader(ctx context.Context, what string, info func(context.Context, jetstream.JetStream) (*jetstream.ClusterInfo, error)) (int, error) {
	nc, err := c.connect()
	if err != nil {
		return -1, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return -1, err
	}
	leader := -1
	err = poll(ctx, func() error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		cl, err := info(rctx, js)
		if err != nil {
			return err
		}
		if cl == nil || cl.Leader == "" {
			return errors.New("no leader")
		}
		i := c.Index(cl.Leader)
		if i < 0 {
			return backoff.Permanent(fmt.Errorf("led by %q, no node of this cluster", cl.Leader))
		}
		if !c.nodes[i].Running() {
			return fmt.Errorf("reported leader %s is not running", cl.Leader)
		}
		leader = i
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("natsproc: leader of %s: %w", what, err)
	}
	return leader, nil
}

// MoveStreamLeader makes node to the leader of stream: it asks the leader
// to step down in favour of it (JetStream's preferred placement) until
// stream info names it. A chaos scenario uses it to put several streams'
// leaders on the node it is about to kill.
func (c *Cluster) MoveStreamLeader(ctx context.Context, stream string, to int) error {
	return c.moveLeader(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, to,
		func(ctx context.Context) (int, error) { return c.StreamLeader(ctx, stream) })
}

// MoveConsumerLeader is MoveStreamLeader for a consumer of stream.
func (c *Cluster) MoveConsumerLeader(ctx context.Context, stream, consumer string, to int) error {
	return c.moveLeader(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+consumer, to,
		func(ctx context.Context) (int, error) { return c.ConsumerLeader(ctx, stream, consumer) })
}

func (c *Cluster) moveLeader(ctx context.Context, stepdown string, to int, leader func(context.Context) (int, error)) error {
	if to < 0 || to >= len(c.nodes) {
		return fmt.Errorf("natsproc: no node %d", to)
	}
	req := []byte(fmt.Sprintf(`{"placement":{"preferred":%q}}`, c.nodes[to].name))
	return poll(ctx, func() error {
		l, err := leader(ctx)
		if err != nil {
			return backoff.Permanent(err)
		}
		if l == to {
			return nil
		}
		nc, err := c.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := nc.RequestWithContext(rctx, stepdown, req); err != nil {
			return fmt.Errorf("step down: %w", err)
		}
		return fmt.Errorf("%s leads, not %s", c.nodes[l].name, c.nodes[to].name)
	})
}

// connect opens a connection to any running node, for the cluster's own
// questions; it does not reconnect.
func (c *Cluster) connect() (*nats.Conn, error) {
	var urls []string
	for _, nd := range c.nodes {
		if nd.Running() {
			urls = append(urls, nd.URL())
		}
	}
	if len(urls) == 0 {
		return nil, errors.New("natsproc: no node is running")
	}
	return nats.Connect(strings.Join(urls, ","), nats.Name("natsproc"), nats.NoReconnect(), nats.Timeout(time.Second),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // not to stderr
}

// Name is the node's server name (n1, n2, ...).
func (nd *Node) Name() string { return nd.name }

// Index is the node's index in its cluster.
func (nd *Node) Index() int { return nd.idx }

// URL is the node's nats:// client URL; it stays the same across restarts.
func (nd *Node) URL() string { return "nats://" + nd.Addr() }

// Addr is the node's client host:port.
func (nd *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.port)) }

// Port is the node's client port.
func (nd *Node) Port() int { return nd.port }

// MonitorURL is the base http:// URL of the node's monitoring endpoints
// (/healthz, /varz, /jsz, ...).
func (nd *Node) MonitorURL() string { return fmt.Sprintf("http://127.0.0.1:%d", nd.mport) }

// Dir is the node's directory: nats.conf, log.txt, and the JetStream store
// under jetstream/.
func (nd *Node) Dir() string { return nd.dir }

// LogPath is the node's log file; every start appends to it.
func (nd *Node) LogPath() string { return nd.logPath }

// Running reports whether the node's process has been started and has not
// exited.
func (nd *Node) Running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.runningLocked()
}

func (nd *Node) runningLocked() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

// Start starts the node's process (on its ports and its store) and waits
// until it accepts client connections. It fails when the node runs already.
func (nd *Node) Start() error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.runningLocked() {
		return fmt.Errorf("natsproc: %s is already running", nd.name)
	}
	f, err := os.OpenFile(nd.logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== natsproc: start %s at %s\n", nd.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(nd.bin, "-c", nd.cfgPath)
	cmd.Stdout, cmd.Stderr = f, f
	// The servers die with the process that started them, whatever happens
	// to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("natsproc: start %s: %w", nd.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== natsproc: %s exited at %s: %v\n", nd.name, time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		close(done)
	}()
	nd.cmd, nd.done = cmd, done
	if err := waitListening(nd.Addr(), done, startTimeout); err != nil {
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(nd.logPath)
		err = fmt.Errorf("natsproc: %s on port %d: %w\n%s", nd.name, nd.port, err, tail(log, 3000))
		if strings.Contains(string(tail(log, 3000)), "address already in use") {
			err = fmt.Errorf("%w: %w", errBind, err)
		}
		return err
	}
	return nil
}

// waitListening waits until addr accepts a TCP connection, the process
// exits (exited closes), or timeout passes.
func waitListening(addr string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return poll(ctx, func() error {
		select {
		case <-exited:
			return backoff.Permanent(errors.New("exited during start-up"))
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return err
		}
		conn.Close()
		return nil
	})
}

// Kill kills the node with SIGKILL (a crash: no lame duck, no flush) and
// waits for it to exit. Killing a node that is not running does nothing.
func (nd *Node) Kill() error { return nd.signalAndWait(syscall.SIGKILL) }

// Stop shuts the node down gracefully (SIGTERM) and waits for it to exit.
func (nd *Node) Stop() error { return nd.signalAndWait(syscall.SIGTERM) }

func (nd *Node) signalAndWait(sig syscall.Signal) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if !nd.runningLocked() {
		return nil
	}
	_ = nd.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	if err := nd.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-nd.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = nd.cmd.Process.Kill()
		<-nd.done
		return fmt.Errorf("natsproc: %s did not exit on %v within 30s; killed", nd.name, sig)
	}
}

// Restart kills the node when it runs, then starts it again on the same
// ports and store. Its JetStream replicas catch up from the others (wait
// with WaitHealthy or the cluster's WaitReady).
func (nd *Node) Restart() error {
	if err := nd.Kill(); err != nil {
		return err
	}
	return nd.Start()
}

// Pause stops the process with SIGSTOP: its connections stay open and it
// answers nothing, as in a long GC pause or a frozen VM.
func (nd *Node) Pause() error { return nd.signal(syscall.SIGSTOP) }

// Resume continues a paused node with SIGCONT.
func (nd *Node) Resume() error { return nd.signal(syscall.SIGCONT) }

func (nd *Node) signal(sig syscall.Signal) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if !nd.runningLocked() {
		return fmt.Errorf("natsproc: %s is not running", nd.name)
	}
	return nd.cmd.Process.Signal(sig)
}

// Healthy reports nil when the node's /healthz answers 200, else why not.
func (nd *Node) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, nd.MonitorURL()+"/healthz", nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /healthz: %d %s", nd.name, res.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// WaitHealthy waits until the node's /healthz answers 200 (see the
// cluster's WaitReady), or ctx ends.
func (nd *Node) WaitHealthy(ctx context.Context) error {
	err := poll(ctx, func() error {
		if !nd.Running() {
			return backoff.Permanent(fmt.Errorf("%s is not running", nd.name))
		}
		return nd.Healthy(ctx)
	})
	if err != nil {
		return fmt.Errorf("natsproc: %s not ready: %w", nd.name, err)
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

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary is the path of the nats-server binary the nodes run: $EnvBinary
// when set, else the nats-server of this module's go.mod, built once per
// process with `go build` run in the module's root. The build goes to the
// user's cache directory (teamster/natsproc), named by its content's hash,
// so processes that build the same server share one file and never write
// over a binary another one runs; the go build cache makes every build
// after the first take about a second.
func Binary() (string, error) {
	binOnce.Do(func() { binPath, binErr = binary() })
	return binPath, binErr
}

func binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "teamster", "natsproc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-o", tmp.Name(), "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("natsproc: go build nats-server in %s: %v\n%s", root, err, out)
	}
	f, err := os.Open(tmp.Name())
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, "nats-server-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", err
	}
	return final, nil
}

// moduleRoot is the directory of the teamster module's go.mod: the one `go
// env GOMOD` names from the working directory (a test's package directory,
// or wherever `go run ./chaos` runs), else the one this source file is in.
func moduleRoot() (string, error) {
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		gomod := strings.TrimSpace(string(out))
		if gomod != "" && gomod != os.DevNull && isTeamster(gomod) {
			return filepath.Dir(gomod), nil
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if isTeamster(filepath.Join(root, "go.mod")) {
			return root, nil
		}
	}
	return "", fmt.Errorf("natsproc: cannot find the teamster module to build nats-server in (run inside it, or set %s)", EnvBinary)
}

func isTeamster(gomod string) bool {
	b, err := os.ReadFile(gomod)
	return err == nil && strings.HasPrefix(string(b), "module github.com/teamster-fleet/teamster\n")
}
