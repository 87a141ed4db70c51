package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
)

func resultCmd(common *cmdutil.Common) *cobra.Command {
	var (
		wait   time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "result <attemptId>",
		Short: "Print an attempt's durable result",
		Long: `result reads an attempt's terminal result from the durable stream
TEAMSTER_RESULTS (kept 24 hours), whoever submitted it and whether or not that
client is still connected. With --wait it waits for the result to appear.

Exit codes: 0 an ok result; 1 no result (or an error); 2 a result that is not ok.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON = asJSON || outputJSON()
			var res *bus.Result
			// The first read has the CLI's own budget; --wait bounds the
			// waiting after it, and nothing else does.
			err := withClient(common, cliTimeout+wait, func(ctx context.Context, c *client.Client) error {
				var err error
				res, err = c.Result(ctx, args[0])
				if errors.Is(err, client.ErrNoResult) && wait > 0 {
					wctx, cancel := context.WithTimeout(ctx, wait)
					defer cancel()
					res, err = c.WaitResult(wctx, args[0])
					if err != nil && wctx.Err() != nil && ctx.Err() == nil {
						err = errNoResultYet
					}
				}
				return err
			})
			if errors.Is(err, errNoResultYet) {
				return &exitError{1, fmt.Errorf("no result for %s within %s (still queued or running, or unknown)", args[0], wait)}
			}
			if errors.Is(err, client.ErrNoResult) {
				return &exitError{1, fmt.Errorf("no result for %s (not finished, unknown, or older than 24 hours)", args[0])}
			}
			if err != nil {
				return &exitError{1, err}
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), res)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "attempt    %s (harness %s)\n", res.AttemptID, dash(res.HarnessID))
				printResult(cmd.OutOrStdout(), res, 0)
			}
			return resultExit(res)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the result to appear")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	_ = cmd.Flags().MarkHidden("json") // -o json says it for every command
	return cmd
}

// errNoResultYet: --wait ran out before the attempt had a result.
var errNoResultYet = errors.New("no result yet")

func cancelCmd(common *cmdutil.Common) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel <attemptId>",
		Short: "Cancel a running attempt",
		Long: `cancel asks the worker running an attempt to cancel it; the attempt ends with
status cancelled. An attempt that is not running is no_active_run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := withClient(common, 10*time.Second, func(ctx context.Context, c *client.Client) error {
				return c.Cancel(ctx, args[0], reason)
			})
			if err != nil {
				return &exitError{1, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancel sent to %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (carried in the result's error message)")
	return cmd
}
