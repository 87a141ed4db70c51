package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
)

func sessionCmd(common *cmdutil.Common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session reset|delete|archive <sessionKey>",
		Short: "Owner operations on a session's record",
		Long: `session runs an owner-only operation on a session's record (teamster.session.<op>):

  reset    clear the native binding and the model-selection lock; with
           --session-id, record the new OpenClaw session id; the pinned
           harness clears its native state; the next turn starts fresh
  delete   remove the record (and the harness's native state)
  archive  mark the record archived and unlock it

Every operation is refused with session_busy while a turn of the session runs.
Delegates can never run them (owner_only).`,
		Args: cobra.ArbitraryArgs,
		RunE: requireSubcommand,
	}
	for _, op := range []string{"reset", "delete", "archive"} {
		var sessionID string
		sub := &cobra.Command{
			Use:   op + " <sessionKey>",
			Short: op + " a session's record",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				err := withClient(common, cliTimeout, func(ctx context.Context, c *client.Client) error {
					return c.SessionOp(ctx, op, bus.SessionOp{SessionKey: args[0], SessionID: sessionID})
				})
				if err != nil {
					return &exitError{1, err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "session %s: %s done\n", args[0], op)
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
