// Command router serves teamster.submit for a teamster fleet: it chooses the
// harness of each prepared attempt with OpenClaw's selection policy, records
// it in Redis and publishes it on JetStream, and runs the reaper. Run any
// number; they share the work in the NATS queue group "routers".
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/metrics"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
)

func main() {
	var (
		common        cmdutil.Common
		runtimeConfig string
		routerID      string
		metricsAddr   string
		replicas      int
		retention     func() (time.Duration, error)
		quietSteps    func() (bool, error)
	)
	cmd := &cobra.Command{
		Use:     "router",
		Short:   "Route prepared attempts to the fleet's workers",
		Version: cmdutil.VersionLine(),
		Long: `router serves teamster.submit: it validates each prepared attempt, chooses its
harness with OpenClaw's selection policy (--runtime-config, in OpenClaw's own
JSON shape; without it every provider is "auto"), records the attempt in Redis
and publishes it to teamster.attempt.<harnessId>. It also runs the reaper, which
answers queue_timeout and worker_lost. Any number of routers may run.

SIGINT or SIGTERM stops serving, finishes the requests in hand and exits 0.`,
		SilenceUsage: true,
		// main prints the error, once.
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := common.Logger()
			if err != nil {
				return err
			}
			keep, err := retention()
			if err != nil {
				return err
			}
			quiet, err := quietSteps()
			if err != nil {
				return err
			}
			var policy *selection.Policy
			if runtimeConfig != "" {
				if policy, err = selection.LoadPolicy(runtimeConfig); err != nil {
					return err
				}
			}
			nc, err := common.ConnectNATS("teamster-router", log)
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
			r, err := router.New(router.Params{NATS: nc, Redis: rdb, Policy: policy, Logger: log, Metrics: metrics.NewRouter(reg),
				Streams: bus.StreamOptions{Replicas: replicas}, AttemptRetention: keep, RouterID: routerID, Version: cmdutil.Version(), QuietAttempts: quiet})
			if err != nil {
				return err
			}
			if err := r.Start(context.Background()); err != nil {
				return err
			}
			if metricsAddr != "" {
				srv, err := metrics.Serve(metricsAddr, reg, r.Ready)
				if err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				defer srv.Close()
				log.WithField("addr", srv.Addr()).Info("serving /metrics, /healthz, /readyz")
			}
			sig := <-cmdutil.Signals()
			log.WithField("signal", sig.String()).Info("stopping")
			r.Stop()
			return nil
		},
	}
	cmdutil.AddCommon(cmd.Flags(), &common)
	cmdutil.AddMetricsAddr(cmd.Flags(), &metricsAddr)
	cmdutil.AddReplicas(cmd.Flags(), &replicas)
	retention = cmdutil.AddRetention(cmd.Flags())
	quietSteps = cmdutil.AddAttemptLogLevel(cmd.Flags())
	cmd.Flags().StringVar(&runtimeConfig, "runtime-config", cmdutil.Env(cmdutil.EnvRuntimeConfig, ""),
		"OpenClaw-format runtime policy JSON (env "+cmdutil.EnvRuntimeConfig+")")
	cmd.Flags().StringVar(&routerID, "router-id", cmdutil.Env(cmdutil.EnvRouterID, ""),
		"the router's id in the registry (KV TEAMSTER_ROUTERS), logs and metrics; default r-<ULID> (env "+cmdutil.EnvRouterID+")")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}
