package fleet

import (
	"net"
	"os"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/redisproc"
)

// StartNATS starts a NATS server with JetStream in this process on
// 127.0.0.1:port (0 picks a free port), its file store in storeDir, as
// teamster's servers run (bus.StartEmbedded). The caller shuts it down
// (StopNATS).
func StartNATS(port int, storeDir string) (*server.Server, error) {
	return bus.StartEmbedded(bus.EmbeddedOptions{Port: port, StoreDir: storeDir})
}

// NATSURL is the nats:// URL of a server StartNATS started.
func NATSURL(s *server.Server) string {
	return "nats://" + s.Addr().(*net.TCPAddr).String()
}

// StopNATS shuts a server StartNATS started down and waits until it is
// gone.
func StopNATS(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// StartRedis starts a redis-server on a free loopback port with its files in
// dir, which it creates when missing. The caller stops it.
func StartRedis(dir string) (*redisproc.Redis, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return redisproc.Start(dir)
}

// RedisOf is how the daemons reach a standalone redis-server (their
// --redis-url).
func RedisOf(r *redisproc.Redis) cmdutil.Common {
	return cmdutil.Common{RedisURL: r.URL(), RedisMode: cmdutil.RedisStandalone}
}
