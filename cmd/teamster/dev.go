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
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
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
	// secure is --secure's directory ("": no authentication, no TLS);
	// gateways are --gateways.
	secure   string
	gateways []string
}

func devCmd(common *cmdutil.Common) *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev [--demo] [--secure DIR]",
		Short: "Run a whole local fleet in this process",
		Long: `dev runs a whole fleet in one process: an embedded NATS server with JetStream
(listening on --nats-port, so the CLI and your own processes can connect),
Redis from --redis-url or TEAMSTER_REDIS_URL when either is given (read as
--redis-mode says: standalone, sentinel or cluster), else a redis-server it
starts on a free port, one router, and --workers workers hosting the built-in scripted
harness under the ids of a sample config ("codex" for openai routes,
"claude-cli" for anthropic), or the harnesses of --worker-config. The sample
workers' scripted harnesses each work in a directory of dev's temp dir (their
write steps write there; reply attachments are read from there).

With --demo it plays a scenario end to end (several sessions of several turns:
ok, a failing script, a timeout, a cancel, a rejected runtime, a fallback),
prints each attempt's selection, events and result, and exits: 0 when every
attempt ended as the scenario expects. Without --demo it runs until SIGINT or
SIGTERM, then drains the workers and stops.

With --secure DIR the NATS server runs as production's do: TLS (a certificate
for localhost and 127.0.0.1, the URL tls://127.0.0.1:<port>) and the shipped
permissions, one NKey user per principal (teamster credentials). dev
generates into DIR what is missing there (kept for the next run): the
gateways of --gateways plus "dev" (the sample host and the demo's client,
which submits as gateway "dev" on teamster.submit.gateway.dev, since a
gateway's attempts may name only its own hostId), the delegate voice-call,
the router "router", the workers, and the operator "operator". Each daemon
logs in as its principal; the anonymous teamster.submit is refused. dev
prints, and writes to DIR/dev.json, the URL, the CA and each gateway's seed
file, inbox prefix and submit subject. Redis stays the local redis-server (or
--redis-url) without TLS or ACL users.`,
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
			if cmd.Flags().Changed("gateways") && o.secure == "" {
				return fmt.Errorf("--gateways needs --secure: without it NATS has no principals")
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
	f.StringVar(&o.secure, "secure", "", "run NATS with TLS and the production permissions, with credentials generated into (and kept in) this directory; Redis stays without TLS (default off)")
	f.StringSliceVar(&o.gateways, "gateways", []string{"gateway-1"}, "with --secure: the gateway ids to make credentials for (\"dev\", the sample host's, is added)")
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
	secure   *devSecure // nil without --secure
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
	if err := f.describe(out, o.demo); err != nil {
		return err
	}
	if o.demo {
		demo := demoLogin{}
		if f.secure != nil {
			demo = demoLogin{Options: f.secure.login("gateway", devHostID), Gateway: devHostID}
		}
		return playDemo(ctx, out, f.nats.ClientURL(), demo)
	}
	sig := <-cmdutil.Signals()
	log.WithField("signal", sig.String()).Info("stopping the fleet")
	return nil
}

// describe prints what the fleet is and how to reach it (and under --secure
// writes DIR/dev.json); with demo, only what the demo's story needs.
func (f *devFleet) describe(out io.Writer, demo bool) error {
	natsURL := f.nats.ClientURL()
	natsNote := "JetStream"
	if f.secure != nil {
		natsNote = "JetStream, TLS, NKey users with the production permissions"
	}
	fmt.Fprintf(out, "teamster dev\n  nats     %s (%s)\n  redis    %s\n  router   1\n  workers  %d\n  host     %q with tools clock, echo (attempts with \"hostId\": %q can call them)\n\n",
		natsURL, natsNote, f.redisURL, len(f.fleet.Workers()), devHostID, devHostID)
	if f.secure != nil {
		in := f.secure.info(natsURL, f.redisURL)
		infoFile, err := f.secure.writeInfo(in)
		if err != nil {
			return err
		}
		in.print(out, infoFile)
	}
	if demo {
		return nil
	}
	fmt.Fprintln(out, "  metrics (/metrics, /healthz, /readyz)")
	names := []string{"router"}
	for _, w := range f.fleet.Workers() {
		names = append(names, w.ID())
	}
	for _, n := range names {
		fmt.Fprintf(out, "    %-7s %s/metrics\n", n, f.fleet.MetricsURL(n))
	}
	fmt.Fprintln(out)
	if f.secure != nil {
		op := devSecureOperator
		fmt.Fprintf(out, "Try:  TEAMSTER_NATS_URL=%s TEAMSTER_NATS_NKEY=%s TEAMSTER_NATS_INBOX_PREFIX=%s TEAMSTER_NATS_TLS_CA=%s TEAMSTER_REDIS_URL=%s teamster status\nCtrl-C stops the fleet.\n",
			natsURL, f.secure.layout.NKey(op), op.InboxPrefix(), f.secure.layout.CA, f.redisURL)
	} else {
		fmt.Fprintf(out, "Try:  TEAMSTER_NATS_URL=%s teamster submit -f attempt.json --follow\nCtrl-C stops the fleet.\n", natsURL)
	}
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
	cfgs, err := devWorkerConfigs(o, filepath.Join(tmp, "workspace"))
	if err != nil {
		return f, err
	}
	natsOpts := bus.EmbeddedOptions{Port: o.natsPort, StoreDir: store} // as fleet.StartNATS starts it
	if o.secure != "" {
		// Each worker's credentials reach only the harnesses it hosts.
		var ids []string
		for _, c := range cfgs {
			hs := make([]string, len(c.Harnesses))
			for i, h := range c.Harnesses {
				hs[i] = h.ID
			}
			ids = append(ids, c.WorkerID+"="+strings.Join(hs, "+"))
		}
		if f.secure, err = newDevSecure(o.secure, o.gateways, ids); err != nil {
			return f, err
		}
		if natsOpts.Configure, err = f.secure.configureNATS(); err != nil {
			return f, err
		}
	}
	if f.nats, err = bus.StartEmbedded(natsOpts); err != nil {
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
	fo := fleet.Options{
		NATSURL: f.nats.ClientURL(), Redis: redisCfg, NamePrefix: "teamster-dev-", Logger: log,
		// A redis-server dev started a moment ago: no lease from before can
		// exist, so no quarantine after its "data loss".
		Workers:      fleet.WorkerTuning{FreshRedis: f.redis != nil},
		DrainWait:    30 * time.Second,
		ServeMetrics: true,
	}
	ro := fleet.RouterOptions{Policy: policy}
	if f.secure != nil {
		fo.Principal = f.secure.login
		ro.ID = devRouterID
	}
	f.fleet = fleet.New(fo)
	if _, err := f.fleet.StartRouter(ctx, ro); err != nil {
		return f, err
	}
	// The sample host: tools a scripted turn can call back through the
	// fleet. Started before the workers, so that it stops after they have
	// drained (a draining turn may still call a tool).
	// Under --secure it logs in as the gateway "dev", whose host id it is.
	hostConn, err := f.fleet.ConnectNATSAs("host", "gateway", devHostID)
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
	for _, cfg := range cfgs {
		if _, err := f.fleet.StartWorker(ctx, cfg); err != nil {
			return f, err
		}
	}
	// Let the router see every worker before anything is submitted (a
	// fleet slow to register still starts; submits then wait for it).
	_ = f.fleet.WaitWorkers(ctx, o.workers, 10*time.Second)
	return f, nil
}

// devWorkerConfigs are the configs of the dev workers: --workers copies of
// --worker-config, their workerIds with -1, -2, ... appended, or else the
// dev harnesses' config as w1, w2, ..., each scripted harness working in
// workspaces/<workerId> (its write steps; reply attachments are read there).
func devWorkerConfigs(o devOptions, workspaces string) ([]*worker.Config, error) {
	var cfgs []*worker.Config
	for i := 1; i <= o.workers; i++ {
		if o.workerConfig == "" {
			id := fmt.Sprintf("w%d", i)
			cfgs = append(cfgs, worker.DevConfig(id, 64).WithScriptedWorkspace(filepath.Join(workspaces, id)))
			continue
		}
		cfg, err := worker.LoadConfig(o.workerConfig)
		if err != nil {
			return nil, err
		}
		cfg.WorkerID = fmt.Sprintf("%s-%d", cfg.WorkerID, i)
		cfgs = append(cfgs, cfg)
	}
	return cfgs, nil
}

// demoLogin is how the demo's client connects and speaks: anonymously on
// the plain subjects (Gateway ""), or under --secure as the gateway "dev",
// on its own subjects (teamster.submit.gateway.dev, ...: the demo's
// attempts name the hostId "dev", and a gateway's attempts may name only
// its own).
type demoLogin struct {
	Options []nats.Option
	Gateway string
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
