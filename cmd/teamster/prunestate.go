package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
)

// pruneBatch is how many session records one Redis pipeline reads.
const pruneBatch = 512

// pruneTimeout bounds the whole listing and deletion.
const pruneTimeout = 5 * time.Minute

func sessionPruneStateCmd(common *cmdutil.Common) *cobra.Command {
	var olderThan time.Duration
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune-state",
		Short: "Delete native state objects that no session record names",
		Long: `prune-state deletes the objects of TEAMSTER_NATIVE_STATE that no session
record names: what a worker leaves when it dies between saving a turn's
native state and the fenced finish that would have named it (the one case
in which the fleet leaves an object behind). It reads the bucket's metadata
once and the session records in pipelines of 512.

An object younger than --older-than is left alone, whoever names it: a turn
saves its state just before its finish, and the finish may still be on its
way (retried for up to a lease TTL, then abandoned within 2 minutes).

Exit codes: 0 done (possibly nothing to delete); 1 a read or a delete failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, in, err := openInspector(common, true)
			if err != nil {
				return &exitError{1, err}
			}
			defer in.close()
			ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
			defer cancel()
			st, err := bus.OpenNativeState(ctx, in.js)
			if err != nil {
				return &exitError{1, err}
			}
			objs, err := st.List(ctx)
			if err != nil {
				return &exitError{1, err}
			}
			type row struct {
				Object   string `json:"object"`
				Bytes    uint64 `json:"bytes"`
				AgeMs    int64  `json:"ageMs"`
				Named    bool   `json:"named"`
				Deleted  bool   `json:"deleted"`
				Decision string `json:"decision"`
			}
			rows := []row{}
			now := time.Now()
			for start := 0; start < len(objs); start += pruneBatch {
				batch := objs[start:min(start+pruneBatch, len(objs))]
				tags := make([]string, len(batch))
				for i, o := range batch {
					tags[i] = bus.StateObjectTag(o.Name)
				}
				named, err := in.store.NativeStates(ctx, tags)
				if err != nil {
					return &exitError{1, fmt.Errorf("read the session records in Redis: %w", err)}
				}
				for i, o := range batch {
					r := row{Object: o.Name, Bytes: o.Size, AgeMs: now.Sub(o.Modified).Milliseconds(), Named: named[i] == o.Name}
					switch {
					case r.Named:
						r.Decision = "kept: its session's record names it"
					case now.Sub(o.Modified) < olderThan:
						r.Decision = "kept: younger than --older-than"
					case dryRun:
						r.Decision = "would delete (--dry-run)"
					default:
						if err := st.Delete(ctx, o.Name); err != nil {
							return &exitError{1, err}
						}
						r.Deleted, r.Decision = true, "deleted"
					}
					rows = append(rows, r)
				}
			}
			if outputJSON() {
				printJSON(cmd.OutOrStdout(), rows)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "OBJECT\tBYTES\tAGE\tDECISION")
			deleted := 0
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Object, r.Bytes, (time.Duration(r.AgeMs) * time.Millisecond).Round(time.Second), r.Decision)
				if r.Deleted {
					deleted++
				}
			}
			tw.Flush()
			fmt.Fprintf(cmd.OutOrStdout(), "%d objects, %d deleted\n", len(rows), deleted)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 10*time.Minute, "leave alone objects younger than this")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be deleted, delete nothing")
	return cmd
}
