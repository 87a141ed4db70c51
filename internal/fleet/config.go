package fleet

import (
	"strconv"
	"strings"
	"time"

	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/worker"
)

// WorkerTuning is what a fleet changes in the config of each of its
// workers, in this process (Options.Workers) or in a config file for a
// worker process (chaos).
type WorkerTuning struct {
	// LeaseTTL replaces the config's leaseTtlMs; 0 keeps it.
	LeaseTTL time.Duration
	// DrainTimeout replaces the config's drainTimeoutMs; 0 keeps it.
	DrainTimeout time.Duration
	// FreshRedis says the fleet's Redis was started empty for this fleet: no
	// lease of an earlier fence epoch can exist, so the workers skip the
	// quarantine after a Redis data loss (newEpochQuarantineMs -1), which
	// would hold every first claim for one lease TTL.
	FreshRedis bool
}

// Apply tunes cfg (changing it) and returns it.
func (t WorkerTuning) Apply(cfg *worker.Config) *worker.Config {
	if t.LeaseTTL != 0 {
		cfg.LeaseTTLMs = t.LeaseTTL.Milliseconds()
	}
	if t.FreshRedis {
		cfg.NewEpochQuarantineMs = -1
	}
	if t.DrainTimeout != 0 {
		cfg.DrainTimeoutMs = t.DrainTimeout.Milliseconds()
	}
	return cfg
}

// DevWorker is the config of a worker hosting the dev harnesses
// (worker.DevConfig: the scripted harness as "codex" and "claude-cli"),
// tuned.
func (t WorkerTuning) DevWorker(id string, slots int) *worker.Config {
	return t.Apply(worker.DevConfig(id, slots))
}

// DaemonArgs are the flags that point a router or worker process at the
// fleet's NATS and Redis and give it the fleet's stream replicas:
// --nats-url, --redis-mode (unless standalone), --redis-url and
// --stream-replicas (when above 1).
func (o Options) DaemonArgs() []string {
	args := []string{"--nats-url", o.NATSURL}
	if m := strings.ToLower(o.Redis.RedisMode); m != "" && m != cmdutil.RedisStandalone {
		args = append(args, "--redis-mode", o.Redis.RedisMode)
	}
	args = append(args, "--redis-url", o.Redis.RedisURL)
	if o.Streams.Replicas > 1 {
		args = append(args, "--stream-replicas", strconv.Itoa(o.Streams.Replicas))
	}
	return args
}
