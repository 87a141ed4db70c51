// Command worker runs a teamster worker: it hosts the harnesses of its config
// file, claims attempts under Redis session leases and runs them.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/worker"
)

func main() {
	var (
		common      cmdutil.Common
		configPath  string
		ledgerPath  string
		metricsAddr string
		replicas    int
		retention   func() (time.Duration, error)
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run attempts of the harnesses this worker hosts",
		Long: `worker hosts the harnesses listed in its config file (--config; see the README
for the format), fetches attempts for them from JetStream only when it has a
free slot, claims each under a Redis session lease (one turn per session at a
time, in order), runs it and publishes exactly one result.

SIGINT or SIGTERM drains the worker: it stops fetching, lets running attempts
finish (cancelling what remains with drain_timeout after drainTimeoutMs),
leaves the registry and exits 0. A second signal exits at once with 1.`,
		SilenceUsage: true,
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
			cfg, err := worker.LoadConfig(configPath)
			if err != nil {
				return err
			}
			var env worker.FactoryEnv
			if ledgerPath != "" {
				l, err := scripted.NewFileLedger(ledgerPath)
				if err != nil {
					return err
				}
				defer l.Close()
				env.Ledger = l
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
				Streams: bus.StreamOptions{Replicas: replicas}, AttemptRetention: keep})
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
					log.Error("second signal: exiting without finishing the drain")
					os.Exit(1)
				}
			}
		},
	}
	cmdutil.AddCommon(cmd.Flags(), &common)
	cmdutil.AddMetricsAddr(cmd.Flags(), &metricsAddr)
	cmdutil.AddReplicas(cmd.Flags(), &replicas)
	retention = cmdutil.AddRetention(cmd.Flags())
	cmd.Flags().StringVar(&configPath, "config", cmdutil.Env(cmdutil.EnvWorkerConfig, ""),
		"worker config JSON file (env "+cmdutil.EnvWorkerConfig+")")
	cmd.Flags().StringVar(&ledgerPath, "ledger", os.Getenv("TEAMSTER_LEDGER"),
		"append the scripted harness's run start/end records to this file (tests; env TEAMSTER_LEDGER)")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
