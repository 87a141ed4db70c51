package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

func explainCmd(common *cmdutil.Common) *cobra.Command {
	var (
		file, policyPath, workerConfig string
		offline                        bool
	)
	cmd := &cobra.Command{
		Use:   "explain -f attempt.json [--config policy.json]",
		Short: "Explain which harness an attempt would get, without submitting it",
		Long: `explain runs the router's harness selection for a prepared attempt and prints
the decision: the runtime and where it came from, the selected harness and the
reason, and every candidate's support result. Nothing is submitted.

The registered harnesses are read from the live registry (KV TEAMSTER_WORKERS)
unless --offline; --worker-config adds the harnesses of a worker config file
(useful offline). The runtime policy is --config (OpenClaw's JSON shape;
default TEAMSTER_RUNTIME_CONFIG, else everything is "auto").

Exit codes: 0 a harness or the embedded runtime is selected; 1 selection fails
(harness_not_registered, harness_unsupported_route) or the input is bad.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("-f is required (a prepared attempt JSON file, or - for standard input)")
			}
			a, err := readAttempt(file)
			if err != nil {
				return err
			}
			var policy *selection.Policy
			if policyPath != "" {
				if policy, err = selection.LoadPolicy(policyPath); err != nil {
					return err
				}
			}
			var manifests []selection.Manifest
			if workerConfig != "" {
				cfg, err := worker.LoadConfig(workerConfig)
				if err != nil {
					return err
				}
				for _, h := range cfg.Harnesses {
					manifests = append(manifests, h.Manifest)
				}
			}
			out := cmd.OutOrStdout()
			var notes []string
			if !offline {
				live, digests, err := liveManifests(common)
				if err != nil {
					notes = append(notes, fmt.Sprintf("registry not read (%v); pass --offline to silence this", err))
				} else {
					manifests = append(manifests, live...)
				}
				if len(digests) > 0 && !slices.Contains(digests, policy.Digest()) {
					notes = append(notes, fmt.Sprintf("the routers run runtime policy %s, not this one (%s): submitted, the attempt may be answered differently",
						strings.Join(digests, ", "), policy.Digest()))
				}
			}
			d, serr := selection.Select(policy, selection.Facts{
				Provider: a.Provider, ModelID: a.ModelID, SessionKey: a.SessionKey, AgentID: a.AgentID,
				AgentHarnessID: a.AgentHarnessID, AgentHarnessRuntimeOverride: a.AgentHarnessRuntimeOverride,
				Routes: a.SelectionRoutes(),
			}, manifests)
			if outputJSON() {
				v := struct {
					Selection *selection.Record `json:"selection"`
					Error     *teamster.Error   `json:"error,omitempty"`
					Notes     []string          `json:"notes,omitempty"`
				}{&d.Record, nil, notes}
				if serr != nil {
					v.Error = teamster.AsError(serr)
				}
				printJSON(out, v)
			} else {
				for _, n := range notes {
					fmt.Fprintf(out, "warning    %s\n", n)
				}
				printSelection(out, &d.Record, serr)
			}
			if serr != nil {
				return &exitError{1, fmt.Errorf("")}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "prepared attempt JSON file (- for standard input)")
	cmd.Flags().StringVar(&policyPath, "config", cmdutil.Env(cmdutil.EnvRuntimeConfig, ""), "OpenClaw-format runtime policy JSON (env "+cmdutil.EnvRuntimeConfig+")")
	cmd.Flags().StringVar(&workerConfig, "worker-config", "", "also count the harnesses of this worker config as registered")
	cmd.Flags().BoolVar(&offline, "offline", false, "do not read the live registry")
	return cmd
}

// liveManifests reads the harnesses live workers advertise.
// liveManifests reads the manifests live workers advertise, and the policy
// digests the live routers run.
func liveManifests(common *cmdutil.Common) ([]selection.Manifest, []string, error) {
	log, err := common.Logger()
	if err != nil {
		return nil, nil, err
	}
	log.SetLevel(0) // panic only: the CLI reports the error itself
	nc, err := common.ConnectNATS("teamster-cli", log)
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	entries, err := bus.ReadRegistry(ctx, js)
	if err != nil {
		return nil, nil, err
	}
	var digests []string
	if routers, err := bus.ReadRouters(ctx, js); err == nil {
		for _, r := range routers {
			if !slices.Contains(digests, r.PolicyDigest) {
				digests = append(digests, r.PolicyDigest)
			}
		}
	}
	return bus.LiveManifests(entries), digests, nil
}
