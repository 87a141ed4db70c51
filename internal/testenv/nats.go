package testenv

import (
	"errors"
	"net"
	"strconv"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster/bus"
)

// NATS is an embedded nats-server with JetStream on a loopback port, its file
// store in a temp dir. Restart keeps the port and the store, as a restarted
// production server keeps its JetStream data.
type NATS struct {
	mu   sync.Mutex
	dir  string
	port int
	srv  *server.Server
}

// StartNATS starts an embedded server with JetStream storing in dir, on a free
// loopback port.
func StartNATS(dir string) (*NATS, error) {
	n := &NATS{dir: dir}
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// Start starts the server, on the port it had before when it ran already.
func (n *NATS) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return errors.New("nats server already running")
	}
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Port: n.port, StoreDir: n.dir})
	if err != nil {
		return err
	}
	n.srv = srv
	n.port = srv.Addr().(*net.TCPAddr).Port
	return nil
}

// URL is the nats:// address of the server; it stays the same across restarts.
func (n *NATS) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
}

// Server is the running server, nil while stopped.
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Stop shuts the server down (clients see their connections close) and waits
// until it is gone. Its JetStream store stays in its directory.
func (n *NATS) Stop() {
	n.mu.Lock()
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart stops the server and starts it again on the same port and store.
func (n *NATS) Restart() error {
	n.Stop()
	return n.Start()
}

// Connect opens a client connection that reconnects forever, as the
// daemons' connections do; the caller closes it.
func (n *NATS) Connect(name string) (*nats.Conn, error) {
	return nats.Connect(n.URL(), nats.Name(name), nats.MaxReconnects(-1))
}
