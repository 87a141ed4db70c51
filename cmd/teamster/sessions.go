package main

// session show and sessions ls.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/leases"
)

// sessionOut is a session as the CLI prints it.
type sessionOut struct {
	SessionTag string          `json:"sessionTag"`
	SessionKey string          `json:"sessionKey,omitempty"`
	Record     json.RawMessage `json:"record,omitempty"`
	Lease      *leaseOut       `json:"lease,omitempty"`
	LastFence  string          `json:"lastFence,omitempty"`
	Order      []string        `json:"order"`
	OrderLen   int64           `json:"orderLength"`
	Queued     int             `json:"queued"`
	Running    int             `json:"running"`
}

type leaseOut struct {
	Holder    string `json:"holder"`
	AttemptID string `json:"attemptId"`
	Fence     string `json:"fence"`
	TTLMs     int64  `json:"ttlMs"`
}

func sessionShowCmd(common *cmdutil.Common) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "show <sessionKey | sessionTag>",
		Short: "A session's record, lease and order",
		Long: `show prints a session's record (what owner turns and session operations
stored: session id, store path, agent, lock, pinned harness, native binding),
its lease (the worker holding it, the attempt, the fence and the time left)
and its order (the attempts not yet finished, the head first).

The session is its key, or its tag: the 24 hex digits that status, attempts
ls and the logs show.

Exit codes: 0 found; 1 Redis knows nothing of the session, or a read failed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tag := sessionTagOf(common.Gateway, args[0])
			ctx, in, err := openInspector(common, false)
			if err != nil {
				return &exitError{1, err}
			}
			defer in.close()
			v, err := in.store.SessionByTag(ctx, tag, limit)
			if errors.Is(err, leases.ErrNotFound) {
				return &exitError{1, fmt.Errorf("no session %s in Redis: no record, lease, fence or queued turn", tag)}
			}
			if err != nil {
				return &exitError{1, fmt.Errorf("read session %s from Redis: %w", tag, err)}
			}
			o := sessionOut{SessionTag: tag, Order: v.Order, OrderLen: v.OrderLen, LastFence: v.Fence}
			if o.Order == nil {
				o.Order = []string{}
			}
			if !leases.IsTag(args[0]) {
				o.SessionKey = args[0]
			}
			if v.Record != nil {
				o.Record, _ = json.Marshal(v.Record)
				if v.Record.SessionKey != "" {
					o.SessionKey = v.Record.SessionKey
				}
			}
			if v.Lease != nil {
				o.Lease = &leaseOut{Holder: v.Lease.Holder, AttemptID: v.Lease.AttemptID, Fence: v.Lease.Fence, TTLMs: v.Lease.TTL.Milliseconds()}
			}
			// The order's attempts, to tell running from queued.
			entries := make([]leases.DueEntry, len(v.Order))
			for i, id := range v.Order {
				entries[i] = leases.DueEntry{Tag: tag, AttemptID: id}
			}
			views, err := in.store.AttemptViews(ctx, entries)
			if err != nil {
				return &exitError{1, fmt.Errorf("read session %s's attempts from Redis: %w", tag, err)}
			}
			var rows []attemptOut
			for i := range views {
				a := fromView(&views[i])
				if o.SessionKey == "" {
					o.SessionKey = a.SessionKey
				}
				switch a.State {
				case stateRunning:
					o.Running++
				case stateQueued:
					o.Queued++
				}
				rows = append(rows, a)
			}
			if outputJSON() {
				printJSON(cmd.OutOrStdout(), o)
				return nil
			}
			printSession(cmd.OutOrStdout(), o, v, rows)
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "show at most this many of the order's attempts")
	return cmd
}

func printSession(out io.Writer, o sessionOut, v *leases.SessionView, rows []attemptOut) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "session\t%s\n", strings.TrimSpace(o.SessionTag+" "+quoted(o.SessionKey)))
	if r := v.Record; r != nil {
		fmt.Fprintf(tw, "session id\t%s\n", dash(r.SessionID))
		fmt.Fprintf(tw, "agent\t%s\n", dash(r.AgentID))
		fmt.Fprintf(tw, "store path\t%s\n", dash(r.StorePath))
		fmt.Fprintf(tw, "harness\t%s (plugin %s)\n", dash(r.AgentHarnessID), dash(r.OwnerPluginID))
		fmt.Fprintf(tw, "locked\t%t\n", r.ModelSelectionLocked)
		fmt.Fprintf(tw, "native binding\t%s\n", dash(clip(r.NativeBinding, 60)))
		if r.NativeState != "" {
			fmt.Fprintf(tw, "native state\tobject %s in %s\n", r.NativeState, bus.BucketNativeState)
		}
		if r.Archived {
			fmt.Fprintf(tw, "archived\tyes\n")
		}
	} else {
		fmt.Fprintf(tw, "record\tnone (no owner turn or session operation yet)\n")
	}
	if o.Lease != nil {
		fmt.Fprintf(tw, "lease\t%s holds it for %s, fence %s, %s left\n", o.Lease.Holder, o.Lease.AttemptID, o.Lease.Fence,
			(time.Duration(o.Lease.TTLMs) * time.Millisecond).String())
	} else {
		fmt.Fprintf(tw, "lease\tnone\n")
	}
	fmt.Fprintf(tw, "last fence\t%s\n", dash(o.LastFence))
	fmt.Fprintf(tw, "order\t%d attempts (%d running, %d queued)\n", o.OrderLen, o.Running, o.Queued)
	tw.Flush()
	if len(rows) > 0 {
		fmt.Fprintln(out)
		printAttempts(out, rows)
	}
}

func sessionsCmd(common *cmdutil.Common) *cobra.Command {
	var limit int
	cmd := groupCmd("sessions ls", "List sessions")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the sessions with attempts in flight",
		Long: `ls lists the sessions that have attempts queued, running or being delivered,
from the reaper index (read up to --limit entries per shard): for each, its
tag and key, how many of its attempts run and wait, and the worker running
one. A session with nothing in flight is not listed: 'teamster session show'
reads any session.

Exit codes: 0 listed (possibly nothing); 1 a read failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, in, err := openInspector(common, false)
			if err != nil {
				return &exitError{1, err}
			}
			defer in.close()
			fl, err := in.store.InFlight(ctx, limit)
			if err != nil {
				return &exitError{1, fmt.Errorf("read the reaper index in Redis: %w", err)}
			}
			type row struct {
				SessionTag string `json:"sessionTag"`
				SessionKey string `json:"sessionKey,omitempty"`
				Running    int    `json:"running"`
				Queued     int    `json:"queued"`
				Delivering int    `json:"delivering"`
				WorkerID   string `json:"workerId,omitempty"`
				LatestAt   string `json:"latestAt"`
			}
			byTag := map[string]*row{}
			var rows []*row
			for i := range fl.Attempts {
				a := fromView(&fl.Attempts[i])
				r := byTag[a.SessionTag]
				if r == nil {
					r = &row{SessionTag: a.SessionTag, SessionKey: a.SessionKey, LatestAt: newest(a)}
					byTag[a.SessionTag] = r
					rows = append(rows, r)
				}
				switch a.State {
				case stateRunning:
					r.Running++
					r.WorkerID = a.WorkerID
				case stateQueued:
					r.Queued++
				default:
					r.Delivering++
				}
			}
			if outputJSON() {
				if rows == nil {
					rows = []*row{}
				}
				printJSON(cmd.OutOrStdout(), rows)
				return nil
			}
			out := cmd.OutOrStdout()
			if len(rows) == 0 {
				fmt.Fprintln(out, "no sessions with attempts in flight")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tKEY\tRUNNING\tQUEUED\tDELIVERING\tWORKER\tLATEST")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.SessionTag, dash(clip(r.SessionKey, 40)), r.Running, r.Queued, r.Delivering,
					dash(r.WorkerID), ago(r.LatestAt))
			}
			tw.Flush()
			return nil
		},
	}
	ls.Flags().IntVar(&limit, "limit", 200, "read at most this many index entries per shard")
	cmd.AddCommand(ls)
	return cmd
}
