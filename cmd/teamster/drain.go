package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
)

// control sends one control op to a worker and returns its reply.
func control(ctx context.Context, nc *nats.Conn, workerID, op string) (*bus.WorkerControlReply, error) {
	subj, err := bus.WorkerControlSubject(workerID)
	if err != nil {
		return nil, err
	}
	body, err := bus.Encode(&bus.WorkerControl{V: bus.Version, Op: op})
	if err != nil {
		return nil, err
	}
	msg, err := nc.RequestWithContext(ctx, subj, body)
	if err != nil {
		return nil, err
	}
	var rep bus.WorkerControlReply
	if err := bus.Decode(msg.Data, &rep); err != nil {
		return nil, fmt.Errorf("control reply: %w", err)
	}
	if rep.Error != nil {
		return &rep, rep.Error
	}
	return &rep, nil
}

func drainCmd(common *cmdutil.Common) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain <workerId> [--wait]",
		Short: "Drain a worker between turns",
		Long: `drain asks a worker to drain: it stops fetching new attempts at once, lets its
running attempts finish (up to its drainTimeoutMs, then cancels the rest with
drain_timeout), releases its leases, leaves the registry and exits 0. New
attempts go to the other workers; a drained session's next turn runs on any
of them with its stored binding.

With --wait, drain waits until the worker has stopped and shows its running
attempts meanwhile. 'teamster resume <workerId>' undoes a drain that has not
finished.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cliConn(common)
			if err != nil {
				return err
			}
			defer nc.Close()
			out := cmd.OutOrStdout()
			// The drain request has a timeout of its own: a worker that
			// is stopped (SIGSTOP) or cut off does not answer.
			rctx, rcancel := context.WithTimeout(context.Background(), controlTimeout)
			rep, err := control(rctx, nc, args[0], bus.ControlDrain)
			rcancel()
			if err != nil {
				return &exitError{1, controlError(args[0], "drain", err)}
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			fmt.Fprintf(out, "worker %s: %s, %d running\n", args[0], rep.State, rep.Running)
			if !wait {
				return nil
			}
			last := -1
			for {
				select {
				case <-ctx.Done():
					return &exitError{1, fmt.Errorf("worker %s still draining after %s", args[0], timeout)}
				case <-time.After(500 * time.Millisecond):
				}
				rctx, rcancel := context.WithTimeout(ctx, controlTimeout)
				rep, err := control(rctx, nc, args[0], bus.ControlStatus)
				rcancel()
				if errors.Is(err, nats.ErrNoResponders) {
					fmt.Fprintf(out, "worker %s: stopped\n", args[0])
					return nil
				}
				if err != nil {
					continue
				}
				if rep.State == bus.WorkerActive {
					return &exitError{1, fmt.Errorf("worker %s was resumed", args[0])}
				}
				if rep.Running != last {
					fmt.Fprintf(out, "worker %s: %s, %d running %v\n", args[0], rep.State, rep.Running, rep.Attempts)
					last = rep.Running
				}
			}
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the worker has stopped")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "with --wait, give up waiting for the worker to stop after this long")
	return cmd
}

func resumeCmd(common *cmdutil.Common) *cobra.Command {
	return &cobra.Command{
		Use:   "resume <workerId>",
		Short: "Undo a drain that has not finished",
		Long: `resume undoes a drain that is still in progress: the worker fetches again. A
drain that has passed its timeout, or a worker that has stopped, cannot be
resumed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cliConn(common)
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
			defer cancel()
			rep, err := control(ctx, nc, args[0], bus.ControlResume)
			if err != nil {
				return &exitError{1, controlError(args[0], "resume", err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "worker %s: %s, %d running\n", args[0], rep.State, rep.Running)
			return nil
		},
	}
}

// controlTimeout bounds one request to a worker's control subject.
const controlTimeout = 10 * time.Second

// controlError says why a worker did not take a control request.
func controlError(workerID, op string, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%s %s: the worker is not running (nothing serves teamster.worker.%s.control)", op, workerID, workerID)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%s %s: no answer within %s (the worker is stopped, overloaded or cut off from NATS; a stopped worker still takes the request when it runs again)", op, workerID, controlTimeout)
	}
	return fmt.Errorf("%s %s: %w", op, workerID, err)
}

// cliConn connects the CLI to NATS, logging nothing itself.
func cliConn(common *cmdutil.Common) (*nats.Conn, error) {
	log, err := common.Logger()
	if err != nil {
		return nil, err
	}
	return common.ConnectNATS("teamster-cli", log)
}
