package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/fleet"
	"github.com/teamster-fleet/teamster/internal/redisproc"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

type devOptions struct {
	natsPort int
	// redis are the settings of an external Redis (--redis-url and
	// --redis-mode given); nil starts a redis-server.
	redis         *cmdutil.Common
	workers       int
	workerConfig  string
	runtimeConfig string
	demo          bool
	storeDir      string
}

func devCmd(common *cmdutil.Common) *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev [--demo]",
		Short: "Run a whole local fleet in this process",
		Long: `dev runs a whole fleet in one process: an embedded NATS server with JetStream
(listening on --nats-port, so the CLI and your own processes can connect),
Redis from --redis-url or TEAMSTER_REDIS_URL when either is given (read as
--redis-mode says: standalone, sentinel or cluster), else a redis-server it
starts on a free port, one router, and --workers workers hosting the built-in scripted
harness under the ids of a sample config ("codex" for openai routes,
"claude-cli" for anthropic), or the harnesses of --worker-config.

With --demo it plays a scenario end to end (several sessions of several turns:
ok, a failing script, a timeout, a cancel, a rejected runtime, a fallback),
prints each attempt's selection, events and result, and exits: 0 when every
attempt ended as the scenario expects. Without --demo it runs until SIGINT or
SIGTERM, then drains the workers and stops.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Redis given by flag or environment is used; otherwise dev
			// starts its own redis-server.
			if cmd.Flags().Changed("redis-url") || os.Getenv(cmdutil.EnvRedisURL) != "" {
				external := *common
				o.redis = &external
			} else if m := strings.ToLower(common.RedisMode); m != "" && m != cmdutil.RedisStandalone {
				return fmt.Errorf("--redis-mode %s needs --redis-url: without one dev starts a standalone redis-server", common.RedisMode)
			}
			return runDev(cmd.Context(), cmd.OutOrStdout(), common, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.natsPort, "nats-port", 4222, "port of the embedded NATS server on 127.0.0.1 (0 picks a free one)")
	f.IntVar(&o.workers, "workers", 2, "number of workers")
	f.StringVar(&o.workerConfig, "worker-config", "", "worker config file for every worker (its workerId gets -1, -2, ... appended)")
	f.StringVar(&o.runtimeConfig, "runtime-config", cmdutil.Env(cmdutil.EnvRuntimeConfig, ""), "OpenClaw-format runtime policy for the router (env "+cmdutil.EnvRuntimeConfig+")")
	f.BoolVar(&o.demo, "demo", false, "play the demo scenario, print it and exit")
	f.StringVar(&o.storeDir, "store-dir", "", "JetStream store directory (default a temp dir, removed on exit)")
	return cmd
}

// devFleet is the fleet `teamster dev` runs: its servers, and the daemons
// internal/fleet assembles on them.
type devFleet struct {
	nats     *server.Server
	redis    *redisproc.Redis // the redis-server dev started; nil with an external Redis
	redisURL string
	fleet    *fleet.Fleet
	tmp      string
}

func runDev(ctx context.Context, out io.Writer, common *cmdutil.Common, o devOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log, err := common.Logger()
	if err != nil {
		return err
	}
	if o.demo && common.LogLevel == "info" {
		// The demo prints what happens; the daemons' info logs would drown it.
		log.SetLevel(logrus.WarnLevel)
	}
	if o.workers < 1 {
		return fmt.Errorf("--workers must be at least 1")
	}
	f, err := startDev(ctx, log, o)
	if f != nil {
		defer f.stop()
	}
	if err != nil {
		return err
	}
	natsURL := f.nats.ClientURL()
	fmt.Fprintf(out, "teamster dev\n  nats     %s (JetStream)\n  redis    %s\n  router   1\n  workers  %d\n  host     %q with tools clock, echo (attempts with \"hostId\": %q can call them)\n\n",
		natsURL, f.redisURL, len(f.fleet.Workers()), devHostID, devHostID)
	if !o.demo {
		fmt.Fprintln(out, "  metrics (/metrics, /healthz, /readyz)")
		names := []string{"router"}
		for _, w := range f.fleet.Workers() {
			names = append(names, w.ID())
		}
		for _, n := range names {
			fmt.Fprintf(out, "    %-7s %s/metrics\n", n, f.fleet.MetricsURL(n))
		}
		fmt.Fprintln(out)
	}
	if o.demo {
		return playDemo(ctx, out, natsURL)
	}
	fmt.Fprintf(out, "Try:  TEAMSTER_NATS_URL=%s teamster submit -f attempt.json --follow\nCtrl-C stops the fleet.\n", natsURL)
	sig := <-cmdutil.Signals()
	log.WithField("signal", sig.String()).Info("stopping the fleet")
	return nil
}

func startDev(ctx context.Context, log *logrus.Logger, o devOptions) (*devFleet, error) {
	f := &devFleet{}
	tmp, err := os.MkdirTemp("", "teamster-dev-")
	if err != nil {
		return nil, err
	}
	f.tmp = tmp
	store := o.storeDir
	if store == "" {
		store = filepath.Join(tmp, "jetstream")
	}
	if f.nats, err = fleet.StartNATS(o.natsPort, store); err != nil {
		return f, fmt.Errorf("embedded NATS on port %d: %w (is another server using it? try --nats-port 0)", o.natsPort, err)
	}
	var redisCfg cmdutil.Common // how the daemons reach Redis
	if o.redis != nil {
		redisCfg = *o.redis
	} else {
		if f.redis, err = fleet.StartRedis(filepath.Join(tmp, "redis")); err != nil {
			return f, err
		}
		redisCfg = fleet.RedisOf(f.redis)
	}
	f.redisURL = redisCfg.RedisURL
	var policy *selection.Policy
	if o.runtimeConfig != "" {
		if policy, err = selection.LoadPolicy(o.runtimeConfig); err != nil {
			return f, err
		}
	}
	f.fleet = fleet.New(fleet.Options{
		NATSURL: f.nats.ClientURL(), Redis: redisCfg, NamePrefix: "teamster-dev-", Logger: log,
		// A redis-server dev started a moment ago: no lease from before can
		// exist, so no quarantine after its "data loss".
		Workers:      fleet.WorkerTuning{FreshRedis: f.redis != nil},
		DrainWait:    30 * time.Second,
		ServeMetrics: true,
	})
	if _, err := f.fleet.StartRouter(ctx, fleet.RouterOptions{Policy: policy}); err != nil {
		return f, err
	}
	// The sample host: tools a scripted turn can call back through the
	// fleet. Started before the workers, so that it stops after they have
	// drained (a draining turn may still call a tool).
	hostConn, err := f.fleet.ConnectNATS("host")
	if err != nil {
		return f, err
	}
	hc, err := client.New(hostConn)
	if err != nil {
		return f, err
	}
	if _, err := hc.ServeHost(devHostID, sampleTools()); err != nil {
		return f, err
	}
	for i := 1; i <= o.workers; i++ {
		var cfg *worker.Config
		if o.workerConfig != "" {
			if cfg, err = worker.LoadConfig(o.workerConfig); err != nil {
				return f, err
			}
			cfg.WorkerID = fmt.Sprintf("%s-%d", cfg.WorkerID, i)
		} else {
			cfg = worker.DevConfig(fmt.Sprintf("w%d", i), 64)
		}
		if _, err := f.fleet.StartWorker(ctx, cfg); err != nil {
			return f, err
		}
	}
	// Let the router see every worker before anything is submitted (a
	// fleet slow to register still starts; submits then wait for it).
	_ = f.fleet.WaitWorkers(ctx, o.workers, 10*time.Second)
	return f, nil
}

// stop drains the workers, stops the router and closes every connection
// (internal/fleet's teardown), then stops the servers.
func (f *devFleet) stop() {
	if f.fleet != nil {
		f.fleet.Close()
	}
	if f.nats != nil {
		fleet.StopNATS(f.nats)
	}
	if f.redis != nil {
		_ = f.redis.Stop()
	}
	_ = os.RemoveAll(f.tmp)
}

// devHostID is the hostId of the sample host `teamster dev` serves.
const devHostID = "dev"

// sampleTools are the tools of the sample host: clock answers the time, echo
// returns its arguments, and fail always fails (to show lastToolError).
func sampleTools() *client.Tools {
	return client.NewTools().
		Register("clock", func(context.Context, json.RawMessage) (any, error) {
			return map[string]string{"now": time.Now().UTC().Format(time.RFC3339)}, nil
		}).
		Register("echo", func(_ context.Context, args json.RawMessage) (any, error) {
			return json.RawMessage(orEmptyObject(args)), nil
		}).
		Register("fail", func(context.Context, json.RawMessage) (any, error) {
			return nil, teamster.Errorf(teamster.CodeHarnessFailed, "the sample tool 'fail' always fails")
		})
}

func orEmptyObject(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}
