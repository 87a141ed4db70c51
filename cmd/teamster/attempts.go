package main

// attempts ls: queued and running attempts from the reaper index, finished
// ones from the results stream.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/leases"
)

// lsFilter is what attempts ls keeps.
type lsFilter struct {
	state, session, harness, worker string
}

func (f lsFilter) keep(o attemptOut) bool {
	return (f.state == "" || f.state == "all" || o.State == f.state) &&
		(f.session == "" || o.SessionTag == f.session) &&
		(f.harness == "" || o.HarnessID == f.harness) &&
		(f.worker == "" || o.WorkerID == f.worker)
}

// sessionTagOf is the tag of a session given by its key or its tag.
//
// A key is gateway's (--gateway): the same key of two tenants names two
// sessions.
func sessionTagOf(gateway, keyOrTag string) string {
	if keyOrTag == "" || leases.IsTag(keyOrTag) {
		return keyOrTag
	}
	return leases.Tag(teamster.Scope(gateway, keyOrTag))
}

func attemptsCmd(common *cmdutil.Common) *cobra.Command {
	var (
		f     lsFilter
		limit int
		scan  int
	)
	cmd := groupCmd("attempts ls", "List attempts")
	ls := &cobra.Command{
		Use:   "ls [--state queued|running|finished|all] [--session KEY|TAG] [--harness ID] [--worker ID]",
		Short: "List queued, running and finished attempts, newest first",
		Long: `ls lists attempts, newest first, at most --limit of them.

Queued and running attempts (and finished ones whose result is still being
delivered) come from the reaper index in Redis, read up to --limit per shard;
finished ones from the results stream TEAMSTER_RESULTS (24 h), its newest
--scan messages at most. --state picks one kind (default all); --session
takes a session key or its tag (the 24 hex digits status and logs show).

Exit codes: 0 listed (possibly nothing); 1 a read failed (what could be read
is still printed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch f.state {
			case "", "all", stateQueued, stateRunning, stateFinished:
			default:
				return &exitError{1, fmt.Errorf("--state %q: want queued, running, finished or all", f.state)}
			}
			if limit < 1 || limit > 10000 {
				return &exitError{1, fmt.Errorf("--limit %d: want 1 to 10000", limit)}
			}
			f.session = sessionTagOf(common.Gateway, f.session)
			ctx, in, err := openInspector(common, f.state == "" || f.state == "all" || f.state == stateFinished)
			if err != nil {
				return &exitError{1, err}
			}
			defer in.close()
			var (
				list  []attemptOut
				fails []string
			)
			if f.state != stateFinished {
				fl, err := in.store.InFlight(ctx, limit)
				if err != nil {
					fails = append(fails, "the reaper index in Redis: "+err.Error())
				} else {
					for i := range fl.Attempts {
						if o := fromView(&fl.Attempts[i]); o.State != stateFinished && f.keep(o) {
							list = append(list, o)
						}
					}
				}
			}
			if f.state == "" || f.state == "all" || f.state == stateFinished {
				fin, err := finished(ctx, in, f, limit, scan)
				if err != nil {
					fails = append(fails, "the results stream: "+err.Error())
				}
				list = append(list, fin...)
			}
			sort.SliceStable(list, func(i, j int) bool { return newest(list[i]) > newest(list[j]) })
			if len(list) > limit {
				list = list[:limit]
			}
			if list == nil {
				list = []attemptOut{}
			}
			if outputJSON() {
				printJSON(cmd.OutOrStdout(), list)
			} else {
				printAttempts(cmd.OutOrStdout(), list)
			}
			if len(fails) > 0 {
				return &exitError{1, fmt.Errorf("could not read %s", strings.Join(fails, "; "))}
			}
			return nil
		},
	}
	ls.Flags().StringVar(&f.state, "state", "", "queued, running, finished or all (default all)")
	ls.Flags().StringVar(&f.session, "session", "", "only this session (its key or its tag)")
	ls.Flags().StringVar(&f.harness, "harness", "", "only this harness id")
	ls.Flags().StringVar(&f.worker, "worker", "", "only attempts claimed by this worker")
	ls.Flags().IntVar(&limit, "limit", 50, "list at most this many")
	ls.Flags().IntVar(&scan, "scan", 2000, "read at most this many of the newest results")
	cmd.AddCommand(ls)
	return cmd
}

// newest orders attempts by their latest step.
func newest(o attemptOut) string {
	for _, t := range []string{o.FinishedAt, o.ClaimedAt, o.AcceptedAt} {
		if t != "" {
			return t
		}
	}
	return ""
}

// finished reads the newest results from TEAMSTER_RESULTS, up to scan
// messages, keeping those f accepts, up to limit; each gets its session from
// its attempt-id key, when Redis still has it.
func finished(ctx context.Context, in *inspector, f lsFilter, limit, scan int) ([]attemptOut, error) {
	st, err := in.js.Stream(ctx, bus.StreamResults)
	if err != nil {
		return nil, err
	}
	info := st.CachedInfo()
	var out []attemptOut
	for seq, n := info.State.LastSeq, 0; seq >= info.State.FirstSeq && seq > 0 && n < scan && len(out) < limit; seq, n = seq-1, n+1 {
		msg, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		var r bus.Result
		if bus.Decode(msg.Data, &r) != nil {
			continue
		}
		// The subject names the tenant: teamster.result.<gatewayId>.<attemptId>.
		scoped := r.AttemptID
		if rest, ok := strings.CutPrefix(msg.Subject, "teamster.result."); ok {
			if gw, id, ok := strings.Cut(rest, "."); ok && id == r.AttemptID {
				scoped = teamster.Scope(gw, id)
			}
		}
		o := attemptOut{AttemptID: scoped, State: stateFinished, HarnessID: r.HarnessID, WorkerID: r.WorkerID,
			Fence: r.Fence, Status: string(r.Status), PublishedAt: stamp(msg.Time), FinishedAt: stamp(msg.Time)}
		if r.Error != nil {
			o.Code = string(r.Error.Code)
		}
		if f.harness != "" && o.HarnessID != f.harness || f.worker != "" && o.WorkerID != f.worker {
			continue
		}
		out = append(out, o)
	}
	ids := make([]string, len(out))
	for i := range out {
		ids[i] = out[i].AttemptID
	}
	tags, err := in.store.TagsOf(ctx, ids)
	if err != nil {
		return out, nil // the sessions are a detail; the list stands
	}
	kept := out[:0]
	for _, o := range out {
		o.SessionTag = tags[o.AttemptID]
		o.AttemptID = teamster.ScopedDisplay(o.AttemptID)
		if f.session == "" || o.SessionTag == f.session {
			kept = append(kept, o)
		}
	}
	return kept, nil
}

func printAttempts(out io.Writer, list []attemptOut) {
	if len(list) == 0 {
		fmt.Fprintln(out, "no attempts")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tSTATE\tOUTCOME\tSESSION\tHARNESS\tWORKER\tSINCE")
	for _, o := range list {
		outcome := o.Status
		if o.Code != "" {
			outcome += " " + o.Code
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.AttemptID, o.State, dash(outcome), dash(o.SessionTag),
			dash(o.HarnessID), dash(o.WorkerID), ago(newest(o)))
	}
	tw.Flush()
}

// ago renders an RFC 3339 time as a duration before now.
func ago(at string) string {
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return "-"
	}
	return time.Since(t).Round(100*time.Millisecond).String() + " ago"
}
