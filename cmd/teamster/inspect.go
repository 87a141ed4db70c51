package main

// attempts ls, attempt show, sessions ls, session show: what the fleet is
// doing, read from the indexes it keeps (the reaper index, the attempt-id
// keys, a session's own keys, the results stream). Every read is bounded;
// nothing scans the Redis keyspace.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/leases"
)

// attemptOut is an attempt as the inspection commands print it, in JSON
// with these names: times are RFC 3339 (…At), durations in ms (…Ms).
type attemptOut struct {
	AttemptID       string `json:"attemptId"`
	SessionTag      string `json:"sessionTag,omitempty"`
	SessionKey      string `json:"sessionKey,omitempty"`
	State           string `json:"state"`
	HarnessID       string `json:"harnessId,omitempty"`
	WorkerID        string `json:"workerId,omitempty"`
	Fence           string `json:"fence,omitempty"`
	Status          string `json:"status,omitempty"`
	Code            string `json:"code,omitempty"`
	AcceptedAt      string `json:"acceptedAt,omitempty"`
	QueueDeadlineAt string `json:"queueDeadlineAt,omitempty"`
	ClaimedAt       string `json:"claimedAt,omitempty"`
	FinishedAt      string `json:"finishedAt,omitempty"`
	FinishedBy      string `json:"finishedBy,omitempty"`
	PublishedAt     string `json:"publishedAt,omitempty"`
	// PublishedBy is the marker token of whoever published the durable
	// result: the run's fence for its worker, a random token for a reaper.
	PublishedBy     string          `json:"publishedBy,omitempty"`
	ResultSent      bool            `json:"resultSent,omitempty"`
	QueueWaitMs     *int64          `json:"queueWaitMs,omitempty"`
	RunMs           *int64          `json:"runMs,omitempty"`
	RecordExpiresMs *int64          `json:"recordExpiresMs,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
}

// Attempt states as the CLI names them: the record's accepted is queued,
// claimed is running.
const (
	stateQueued   = "queued"
	stateRunning  = "running"
	stateFinished = "finished"
)

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func msPtr(d time.Duration) *int64 { ms := d.Milliseconds(); return &ms }

func fromView(v *leases.AttemptView) attemptOut {
	o := attemptOut{AttemptID: v.AttemptID, SessionTag: v.Tag, SessionKey: v.SessionKey, HarnessID: v.HarnessID,
		WorkerID: v.WorkerID, Fence: v.Fence, AcceptedAt: stamp(v.AcceptedAt), QueueDeadlineAt: stamp(v.QueueDeadline),
		ClaimedAt: stamp(v.ClaimedAt), FinishedAt: stamp(v.FinishedAt), FinishedBy: v.FinishedBy,
		PublishedAt: stamp(v.PublishedAt), PublishedBy: v.PublishedBy, ResultSent: v.Sent}
	switch {
	case v.Outcome != "" || v.State == leases.StateFinished:
		o.State = stateFinished
	case v.Running():
		o.State = stateRunning
	default:
		o.State = stateQueued
	}
	if v.Outcome != "" {
		o.Status, o.Code = string(teamster.StatusOK), ""
		if v.Outcome != leases.OutcomeOK {
			o.Status, o.Code = string(teamster.Code(v.Outcome).ResultStatus()), v.Outcome
		}
	}
	if !v.ClaimedAt.IsZero() && !v.AcceptedAt.IsZero() {
		o.QueueWaitMs = msPtr(v.ClaimedAt.Sub(v.AcceptedAt))
	}
	if !v.FinishedAt.IsZero() && !v.ClaimedAt.IsZero() {
		o.RunMs = msPtr(v.FinishedAt.Sub(v.ClaimedAt))
	}
	if v.Expires > 0 {
		o.RecordExpiresMs = msPtr(v.Expires)
	}
	if json.Valid(v.Result) {
		o.Result = v.Result
	}
	return o
}

// inspector holds the connections an inspection command reads.
type inspector struct {
	js    jetstream.JetStream
	store *leases.Store
	rdb   redis.UniversalClient
	close func()
}

// openInspector connects to NATS (when needNATS) and Redis; errors name
// which. The context bounds the command's reads (requestTimeout); close ends
// it and the connections.
func openInspector(common *cmdutil.Common, needNATS bool) (context.Context, *inspector, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	in := &inspector{close: cancel}
	if needNATS {
		nc, err := cliConn(common)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		if in.js, err = jetstream.New(nc); err != nil {
			nc.Close()
			cancel()
			return nil, nil, err
		}
		in.close = func() { nc.Close(); cancel() }
	}
	rdb, err := common.Redis(ctx)
	if err != nil {
		in.close()
		return nil, nil, err
	}
	in.rdb, in.store = rdb, leases.NewStore(rdb)
	prev := in.close
	in.close = func() { rdb.Close(); prev() }
	return ctx, in, nil
}

// requestTimeout bounds an inspection command's reads.
const requestTimeout = 10 * time.Second

func attemptCmd(common *cmdutil.Common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attempt show <attemptId>",
		Short: "Inspect one attempt",
		Args:  cobra.ArbitraryArgs,
		RunE:  requireSubcommand,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "show <attemptId>",
		Short: "An attempt's record, timestamps and result",
		Long: `show prints an attempt's record from Redis: its session (tag and key), state
(queued, running, finished), harness, worker and fence, the times of its
acceptance, queue deadline, claim, finish and publish, who finished it (a
worker, or the fleet: queue_timeout, worker_lost) and its outcome, then its
durable result from TEAMSTER_RESULTS when the stream still holds it.

Events are not kept: they go to the submitter's reply subject only.
Records stay for the attempt retention after they finish (24 h by default).

Exit codes: 0 found; 1 unknown id, or a read failed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := bus.CheckID("attemptId", id); err != nil {
				return &exitError{1, err}
			}
			ctx, in, err := openInspector(common, true)
			if err != nil {
				return &exitError{1, err}
			}
			defer in.close()
			v, err := in.store.AttemptByID(ctx, id)
			if errors.Is(err, leases.ErrNotFound) {
				return &exitError{1, fmt.Errorf("no attempt %s in Redis (never accepted, or finished longer ago than the attempt retention)", id)}
			}
			if err != nil {
				return &exitError{1, fmt.Errorf("read attempt %s from Redis: %w", id, err)}
			}
			o := fromView(v)
			var durable json.RawMessage
			var resErr error
			if o.State == stateFinished {
				durable, resErr = readResult(ctx, in.js, id)
			}
			if outputJSON() {
				printJSON(cmd.OutOrStdout(), struct {
					attemptOut
					DurableResult json.RawMessage `json:"durableResult,omitempty"`
				}{o, durable})
			} else {
				printAttempt(cmd.OutOrStdout(), o, durable)
			}
			if resErr != nil {
				return &exitError{1, fmt.Errorf("read the durable result of %s: %w", id, resErr)}
			}
			return nil
		},
	})
	return cmd
}

// readResult reads an attempt's durable result; nil when the stream holds none.
func readResult(ctx context.Context, js jetstream.JetStream, id string) (json.RawMessage, error) {
	st, err := js.Stream(ctx, bus.StreamResults)
	if err != nil {
		return nil, err
	}
	subject, err := bus.ResultSubject(id)
	if err != nil {
		return nil, err
	}
	msg, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return msg.Data, nil
}

func printAttempt(out io.Writer, o attemptOut, durable json.RawMessage) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("attempt", o.AttemptID)
	row("state", o.State)
	row("session", strings.TrimSpace(o.SessionTag+" "+quoted(o.SessionKey)))
	row("harness", o.HarnessID)
	row("worker", o.WorkerID)
	row("fence", o.Fence)
	outcome := o.Status
	if o.Code != "" {
		outcome += " " + o.Code
	}
	row("outcome", outcome)
	row("accepted", o.AcceptedAt)
	if o.State == stateQueued {
		row("queue deadline", o.QueueDeadlineAt)
	}
	row("claimed", withMs(o.ClaimedAt, o.QueueWaitMs, "after acceptance"))
	row("finished", withMs(o.FinishedAt, o.RunMs, "run")+by(o.FinishedBy))
	publisher := ""
	switch {
	case o.PublishedBy == "":
	case o.PublishedBy == o.Fence && o.WorkerID != "":
		publisher = " by its worker, " + o.WorkerID
	default:
		publisher = " by a reaper"
	}
	row("published", o.PublishedAt+publisher)
	if o.PublishedAt != "" {
		row("result event", map[bool]string{true: "sent", false: "not confirmed sent"}[o.ResultSent])
	}
	if o.RecordExpiresMs != nil {
		row("record kept", (time.Duration(*o.RecordExpiresMs)*time.Millisecond).Round(time.Second).String()+" more")
	}
	tw.Flush()
	if len(durable) > 0 {
		var r bus.Result
		if bus.Decode(durable, &r) == nil {
			fmt.Fprintln(out)
			printResult(out, &r, 0)
		}
	} else if o.State == stateFinished {
		fmt.Fprintln(out, "\n(the results stream no longer holds its result)")
	}
}

func quoted(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("%q", s)
}

func withMs(at string, ms *int64, what string) string {
	if at == "" || ms == nil {
		return at
	}
	return fmt.Sprintf("%s (%s %s)", at, (time.Duration(*ms) * time.Millisecond).String(), what)
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return " by " + who
}

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
func sessionTagOf(keyOrTag string) string {
	if keyOrTag == "" || leases.IsTag(keyOrTag) {
		return keyOrTag
	}
	return leases.Tag(keyOrTag)
}

func attemptsCmd(common *cmdutil.Common) *cobra.Command {
	var (
		f     lsFilter
		limit int
		scan  int
	)
	cmd := &cobra.Command{
		Use:   "attempts ls",
		Short: "List attempts",
		Args:  cobra.ArbitraryArgs,
		RunE:  requireSubcommand,
	}
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
			f.session = sessionTagOf(f.session)
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
		o := attemptOut{AttemptID: r.AttemptID, State: stateFinished, HarnessID: r.HarnessID, WorkerID: r.WorkerID,
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
			tag := sessionTagOf(args[0])
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
	cmd := &cobra.Command{
		Use:   "sessions ls",
		Short: "List sessions",
		Args:  cobra.ArbitraryArgs,
		RunE:  requireSubcommand,
	}
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
