package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/leases"
)

func sessionCmd(common *cmdutil.Common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session show|reset|delete|archive <sessionKey> | prune-state",
		Short: "Inspect a session, or run an owner operation on its record",
		Long: `session show prints a session's record, lease and order (see 'session show
--help'). The other subcommands run an owner-only operation on the record
(teamster.session.<op>):

  reset    clear the native binding and the model-selection lock; with
           --session-id, record the new OpenClaw session id; the pinned
           harness clears its native state; the next turn starts fresh
  delete   remove the record (and the harness's native state)
  archive  mark the record archived and unlock it

session prune-state deletes native state objects no record names (see
'session prune-state --help').

Every operation is refused with session_busy while a turn of the session runs.
Delegates can never run them (owner_only).`,
		Args: cobra.ArbitraryArgs,
		RunE: requireSubcommand,
	}
	cmd.AddCommand(sessionShowCmd(common), sessionPruneStateCmd(common))
	for _, op := range []string{"reset", "delete", "archive"} {
		var sessionID string
		sub := &cobra.Command{
			Use:   op + " <sessionKey>",
			Short: op + " a session's record",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				found := true
				err := withClient(common, cliTimeout, func(ctx context.Context, c *client.Client) error {
					var err error
					found, err = c.SessionOpFound(ctx, op, bus.SessionOp{SessionKey: args[0], SessionID: sessionID})
					return err
				})
				if err != nil {
					return &exitError{1, fmt.Errorf("session %s: %s: %w", args[0], op, err)}
				}
				if outputJSON() {
					printJSON(cmd.OutOrStdout(), map[string]any{"sessionKey": args[0], "sessionTag": leases.Tag(teamster.Scope(common.Gateway, args[0])), "op": op, "found": found})
				}
				if !found {
					return &exitError{1, fmt.Errorf("session %s (%s) has no record: nothing to %s", args[0], leases.Tag(teamster.Scope(common.Gateway, args[0])), op)}
				}
				if !outputJSON() {
					fmt.Fprintf(cmd.OutOrStdout(), "session %s (%s): %s done\n", args[0], leases.Tag(teamster.Scope(common.Gateway, args[0])), op)
				}
				return nil
			},
		}
		if op == "reset" {
			sub.Flags().StringVar(&sessionID, "session-id", "", "the session's new OpenClaw session id")
		}
		cmd.AddCommand(sub)
	}
	return cmd
}
