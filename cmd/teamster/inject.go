package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
)

func injectCmd(common *cmdutil.Common) *cobra.Command {
	var (
		session, attempt, text, source string
		debounce                       int64
	)
	cmd := &cobra.Command{
		Use:   "inject --session KEY --text TEXT [--source ID:GEN]",
		Short: "Steer a running turn",
		Long: `inject sends input to a session's running turn, wherever it runs (--session),
or to one attempt (--attempt). Plain input carries the run's authority; with
--source ID:GEN it is source-bound: it is dispatched only while that source's
authority still has generation GEN, checked at the last moment, and a harness
that cannot enforce that (V1) refuses it with injection_requires_v2.

The reply says accepted (the injection id; its settlement arrives as an
injection event on the attempt's reply subject) or rejected with its code.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (session == "") == (attempt == "") {
				return fmt.Errorf("give exactly one of --session and --attempt")
			}
			req := bus.InjectRequest{SessionKey: session, AttemptID: attempt, Text: text, AuthorityKind: bus.AuthorityRun, DebounceMs: debounce}
			if source != "" {
				id, gen, ok := strings.Cut(source, ":")
				n, err := strconv.ParseInt(gen, 10, 64)
				if !ok || err != nil {
					return fmt.Errorf("--source %q: want ID:GENERATION", source)
				}
				req.AuthorityKind = bus.AuthoritySourceBound
				req.Source = &bus.SourceRef{ID: id, Generation: n}
			}
			return withClient(common, cliTimeout, func(ctx context.Context, c *client.Client) error {
				rep, err := c.Inject(ctx, req)
				if err != nil {
					return &exitError{1, err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "accepted  %s into attempt %s\n", rep.InjectionID, rep.AttemptID)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "the session whose running turn gets the input")
	cmd.Flags().StringVar(&attempt, "attempt", "", "the attempt that gets the input")
	cmd.Flags().StringVar(&text, "text", "", "the input")
	cmd.Flags().StringVar(&source, "source", "", "make the input source-bound to ID:GENERATION")
	cmd.Flags().Int64Var(&debounce, "debounce-ms", 0, "let a batching harness wait this long for more input")
	return cmd
}

func grantSourceCmd(common *cmdutil.Common) *cobra.Command {
	return &cobra.Command{
		Use:   "grant-source <id> <generation>",
		Short: "Grant a source authority a generation",
		Long: `grant-source makes generation the current authority of source id: source-bound
input carrying exactly that generation may be dispatched. A new grant must be
above every revoked generation.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			gen, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil {
				return fmt.Errorf("generation %q: %w", args[1], err)
			}
			return withClient(common, cliTimeout, func(ctx context.Context, c *client.Client) error {
				if err := c.GrantSource(ctx, args[0], gen); err != nil {
					return &exitError{1, err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "source %s: generation %d granted\n", args[0], gen)
				return nil
			})
		},
	}
}

func revokeSourceCmd(common *cmdutil.Common) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke-source <id>",
		Short: "Revoke a source authority",
		Long: `revoke-source revokes source id, permanently for every generation up to the
current one: its source-bound input still in flight is dropped with
source_revoked, and a new grant must carry a higher generation.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(common, cliTimeout, func(ctx context.Context, c *client.Client) error {
				if err := c.RevokeSource(ctx, args[0]); err != nil {
					return &exitError{1, err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "source %s revoked\n", args[0])
				return nil
			})
		},
	}
}

// cliTimeout bounds a CLI request to the fleet.
const cliTimeout = 15 * time.Second

// withClient connects, runs f with deadline timeout, and disconnects.
func withClient(common *cmdutil.Common, timeout time.Duration, f func(ctx context.Context, c *client.Client) error) error {
	nc, err := cliConn(common)
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithGateway(common.Gateway))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return f(ctx, c)
}
