package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/leases"
)

// fleetStatus is what `teamster status` shows; its JSON is the --json output.
type fleetStatus struct {
	Workers []workerStatus `json:"workers"`
	Queues  []queueStatus  `json:"queues"`
	Leases  *leaseStatus   `json:"leases,omitempty"`
	// Errors lists what could not be read (the rest is still shown).
	Errors []string `json:"errors,omitempty"`
}

type workerStatus struct {
	ID          string   `json:"workerId"`
	State       string   `json:"state"`
	Harnesses   []string `json:"harnesses"`
	SlotsUsed   int      `json:"slotsUsed"`
	Slots       int      `json:"slots"`
	Running     []string `json:"running"`
	HeartbeatMs int64    `json:"heartbeatMs"`
	Version     string   `json:"version,omitempty"`
}

type queueStatus struct {
	Harness     string `json:"harness"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ackPending"`
	Redelivered int    `json:"redelivered"`
}

type leaseStatus struct {
	Held  int                `json:"held"`
	Shown []leases.LeaseInfo `json:"shown"`
}

func statusCmd(common *cmdutil.Common) *cobra.Command {
	var (
		asJSON    bool
		maxLeases int
	)
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "What the fleet is doing",
		Long: `status shows the workers in the registry (state, harnesses, slots used, running
attempts, last heartbeat), the queue depth of every harness consumer (attempts
waiting to be claimed, and delivered but not yet acknowledged), and the session
leases held in Redis. --json prints the same for scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, err := cliConn(common)
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st := &fleetStatus{Workers: []workerStatus{}, Queues: []queueStatus{}}
			entries, err := bus.ReadRegistry(ctx, js)
			if err != nil {
				st.Errors = append(st.Errors, "registry: "+err.Error())
			}
			for _, e := range entries {
				ws := workerStatus{ID: e.WorkerID, State: e.State, Slots: e.Slots, SlotsUsed: e.InFlight,
					HeartbeatMs: e.HeartbeatMs, Version: e.Version, Running: []string{}}
				for _, h := range e.Harnesses {
					ws.Harnesses = append(ws.Harnesses, h.ID)
				}
				if rep, err := control(ctx, nc, e.WorkerID, bus.ControlStatus); err == nil {
					ws.Running = rep.Attempts
					sort.Strings(ws.Running)
				}
				st.Workers = append(st.Workers, ws)
			}
			if s, err := js.Stream(ctx, bus.StreamAttempts); err != nil {
				st.Errors = append(st.Errors, "attempts stream: "+err.Error())
			} else {
				for name := range s.ConsumerNames(ctx).Name() {
					c, err := s.Consumer(ctx, name)
					if err != nil {
						continue
					}
					info, err := c.Info(ctx)
					if err != nil {
						continue
					}
					st.Queues = append(st.Queues, queueStatus{Harness: strings.TrimPrefix(name, "harness_"),
						Pending: info.NumPending, AckPending: info.NumAckPending, Redelivered: info.NumRedelivered})
				}
				sort.Slice(st.Queues, func(i, j int) bool { return st.Queues[i].Harness < st.Queues[j].Harness })
			}
			if rdb, err := common.Redis(ctx); err != nil {
				st.Errors = append(st.Errors, "redis: "+err.Error())
			} else {
				held, shown, err := leases.NewStore(rdb).Leases(ctx, maxLeases)
				rdb.Close()
				if err != nil {
					st.Errors = append(st.Errors, "leases: "+err.Error())
				} else {
					st.Leases = &leaseStatus{Held: held, Shown: shown}
				}
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), st)
				return nil
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	cmd.Flags().IntVar(&maxLeases, "leases", 20, "show at most this many leases")
	return cmd
}

func printStatus(out io.Writer, st *fleetStatus) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSTATE\tHARNESSES\tSLOTS\tRUNNING\tHEARTBEAT")
	for _, w := range st.Workers {
		running := fmt.Sprint(len(w.Running))
		if len(w.Running) > 0 {
			running += " (" + strings.Join(firstN(w.Running, 3), ", ") + ")"
		}
		ago := time.Since(time.UnixMilli(w.HeartbeatMs)).Round(100 * time.Millisecond)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s ago\n", w.ID, w.State, strings.Join(w.Harnesses, ","), w.SlotsUsed, w.Slots, running, ago)
	}
	if len(st.Workers) == 0 {
		fmt.Fprintln(tw, "(no workers registered)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "HARNESS\tWAITING\tDELIVERED\tREDELIVERED")
	for _, q := range st.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", q.Harness, q.Pending, q.AckPending, q.Redelivered)
	}
	tw.Flush()
	if st.Leases != nil {
		fmt.Fprintf(out, "\n%d session leases held\n", st.Leases.Held)
		if len(st.Leases.Shown) > 0 {
			tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tATTEMPT\tWORKER\tFENCE\tTTL")
			for _, l := range st.Leases.Shown {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Tag, l.AttemptID, l.Holder, l.Fence, l.TTL.Round(time.Millisecond))
			}
			tw.Flush()
		}
	}
	for _, e := range st.Errors {
		fmt.Fprintf(out, "could not read %s\n", e)
	}
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string{}, s[:n]...), "…")
}
