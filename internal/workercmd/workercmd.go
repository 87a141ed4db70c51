// Package workercmd is the worker daemon's command: flags and environment,
// connections, the metrics server, and the drain on SIGINT or SIGTERM.
// cmd/worker runs it as it is; internal/testworker runs it with test hooks
// (the scripted harness's ledger), which no production flag offers.
package workercmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/worker"
)

// TestHooks extend the command for a test binary; cmd/worker passes none.
type TestHooks struct {
	// Flags registers the test binary's own flags.
	Flags func(fs *pflag.FlagSet)
	// Env, called once the flags are parsed, is the environment of the
	// worker's harness factories (worker.FactoryEnv) and what to do when
	// the worker has exited.
	Env func() (env worker.FactoryEnv, done func(), err error)
}

// Main runs the worker command and exits the process: 1 when it failed.
func Main(hooks TestHooks) {
	if err := Command(hooks).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// Command is the worker command.
func Command(hooks TestHooks) *cobra.Command {
	var (
		common      cmdutil.Common
		configPath  string
		metricsAddr string
		replicas    int
		retention   func() (time.Duration, error)
		quietSteps  func() (bool, error)
	)
	cmd := &cobra.Command{
		Use:     "worker",
		Short:   "Run attempts of the harnesses this worker hosts",
		Version: cmdutil.VersionLine(),
		Long: `worker hosts the harnesses listed in its config file (--config; see the README
for the format), fetches attempts for them from JetStream only when it has a
free slot, claims each under a Redis session lease (one turn per session at a
time, in order), runs it and publishes exactly one result.

SIGINT or SIGTERM drains the worker: it stops fetching, lets running attempts
finish (cancelling what remains with drain_timeout after drainTimeoutMs),
leaves the registry and exits 0. A second signal stops it without waiting:
every running attempt is cancelled with drain_timeout at once (each still
records its result and releases its lease) and the worker exits 1. A third
signal exits at once with 1, leaving its leases to expire.`,
		SilenceUsage: true,
		// main prints the error, once.
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := common.Logger()
			if err != nil {
				return err
			}
			if configPath == "" {
				return fmt.Errorf("--config is required (env %s)", cmdutil.EnvWorkerConfig)
			}
			keep, err := retention()
			if err != nil {
				return err
			}
			quiet, err := quietSteps()
			if err != nil {
				return err
			}
			cfg, err := worker.LoadConfig(configPath)
			if err != nil {
				return err
			}
			var env worker.FactoryEnv
			if hooks.Env != nil {
				var done func()
				if env, done, err = hooks.Env(); err != nil {
					return err
				}
				defer done()
			}
			nc, err := common.ConnectNATS("teamster-worker-"+cfg.WorkerID, log)
			if err != nil {
				return err
			}
			defer nc.Close()
			rdb, err := common.Redis(context.Background())
			if err != nil {
				return err
			}
			defer rdb.Close()
			reg := cmdutil.Registry()
			w, err := worker.New(worker.Params{Config: cfg, NATS: nc, Redis: rdb, Logger: log, Env: env, Metrics: metrics.NewWorker(reg),
				Streams: bus.StreamOptions{Replicas: replicas}, AttemptRetention: keep, Version: cmdutil.Version(), QuietAttempts: quiet})
			if err != nil {
				return err
			}
			if metricsAddr != "" {
				srv, err := metrics.Serve(metricsAddr, reg, w.Ready)
				if err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				defer srv.Close()
				log.WithField("addr", srv.Addr()).Info("serving /metrics, /healthz, /readyz")
			}
			if err := w.Start(context.Background()); err != nil {
				return err
			}
			signals := cmdutil.Signals()
			for {
				select {
				case sig := <-signals:
					log.WithField("signal", sig.String()).Info("draining")
				case <-w.Done():
					return nil // drained through its control subject
				}
				done := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout()+time.Minute)
					defer cancel()
					done <- w.Drain(ctx)
				}()
				select {
				case err := <-done:
					if errors.Is(err, worker.ErrResumed) {
						log.Warn("the drain was undone by a resume; running until the next signal")
						continue
					}
					return err
				case <-signals:
					log.Warn("second signal: stopping now, cancelling the running attempts with drain_timeout")
					w.Stop()
				}
				select {
				case <-w.Done():
					return errors.New("stopped by a second signal before the drain finished")
				case <-signals:
					log.Error("third signal: exiting without the results of the running attempts; their leases expire")
					os.Exit(1)
				}
			}
		},
	}
	cmdutil.AddCommon(cmd.Flags(), &common)
	cmdutil.AddMetricsAddr(cmd.Flags(), &metricsAddr)
	cmdutil.AddReplicas(cmd.Flags(), &replicas)
	retention = cmdutil.AddRetention(cmd.Flags())
	quietSteps = cmdutil.AddAttemptLogLevel(cmd.Flags())
	cmd.Flags().StringVar(&configPath, "config", cmdutil.Env(cmdutil.EnvWorkerConfig, ""),
		"worker config JSON file (env "+cmdutil.EnvWorkerConfig+")")
	if hooks.Flags != nil {
		hooks.Flags(cmd.Flags())
	}
	return cmd
}
