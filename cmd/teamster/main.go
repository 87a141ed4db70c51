// Command teamster is the operator and developer CLI of a teamster fleet:
// run a whole local fleet (dev), submit attempts and follow them, read
// results, explain a harness selection, cancel a run.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/internal/cmdutil"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	var common cmdutil.Common
	root := &cobra.Command{
		Use:   "teamster",
		Short: "Operate and develop against a teamster fleet",
		Long: `teamster is the CLI of a teamster fleet: routers choose the harness of each
prepared attempt and publish it on NATS JetStream; workers claim attempts under
Redis session leases and run them; events and one result flow back.

Settings come from flags or the environment: TEAMSTER_NATS_URL,
TEAMSTER_REDIS_URL, TEAMSTER_LOG_LEVEL, TEAMSTER_LOG_FORMAT.`,
		Version:       cmdutil.VersionLine(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmdutil.AddCommon(root.PersistentFlags(), &common)
	root.PersistentFlags().StringVar(&common.Gateway, "gateway", cmdutil.Env("TEAMSTER_GATEWAY", ""), "act as gateway ID, a tenant: its requests go on its own subjects (<subject>.gateway.<ID>), its sessions, attempts, sources and results are its own, and the inbox prefix defaults to _INBOX.gateway.<ID> (what per-principal NATS permissions require; env TEAMSTER_GATEWAY)")
	root.PersistentFlags().StringVarP(&output, "output", "o", "table", "output format: table (for people) or json (for scripts: stable field names, times as RFC 3339 …At, durations as …Ms)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if output != "table" && output != "json" {
			return fmt.Errorf("--output %q: want table or json", output)
		}
		// Checks the log flags, and sends go-redis's lines to the logger.
		_, err := common.Logger()
		return err
	}
	root.AddCommand(
		devCmd(&common),
		submitCmd(&common),
		resultCmd(&common),
		explainCmd(&common),
		cancelCmd(&common),
		sessionCmd(&common),
		statusCmd(&common),
		attemptsCmd(&common),
		attemptCmd(&common),
		sessionsCmd(&common),
		healthCmd(),
		credentialsCmd(),
		drainCmd(&common),
		resumeCmd(&common),
		injectCmd(&common),
		grantSourceCmd(&common),
		revokeSourceCmd(&common),
		&cobra.Command{
			Use:   "version",
			Short: "Print teamster's version and the Go version it was built with",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintln(cmd.OutOrStdout(), "teamster version "+cmdutil.VersionLine())
			},
		},
	)
	if err := root.Execute(); err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if err.Error() != "" {
			fmt.Fprintln(os.Stderr, "teamster:", err)
		}
		os.Exit(code)
	}
}

// output is the --output format: table or json.
var output = "table"

// outputJSON says the output is JSON.
func outputJSON() bool { return output == "json" }

// groupCmd is a command that only groups subcommands (requireSubcommand).
func groupCmd(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs, RunE: requireSubcommand}
}

// requireSubcommand is the RunE of a command that only groups subcommands:
// without one, or with an unknown one, it fails (exit 1) instead of printing
// the help and exiting 0.
func requireSubcommand(cmd *cobra.Command, args []string) error {
	names := make([]string, 0, len(cmd.Commands()))
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(args) == 0 {
		return fmt.Errorf("%s needs a subcommand: %s (see --help)", cmd.CommandPath(), strings.Join(names, ", "))
	}
	return fmt.Errorf("unknown command %q for %s: the subcommands are %s (see --help)", args[0], cmd.CommandPath(), strings.Join(names, ", "))
}
