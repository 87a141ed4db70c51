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
	// Scoped names as people read them: <gatewayId>/<name> for a
	// gateway's (teamster.ScopedDisplay).
	o := attemptOut{AttemptID: teamster.ScopedDisplay(v.AttemptID), SessionTag: v.Tag, SessionKey: teamster.ScopedDisplay(v.SessionKey), HarnessID: v.HarnessID,
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
	cmd := groupCmd("attempt show <attemptId>", "Inspect one attempt")
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
			v, err := in.store.AttemptByID(ctx, teamster.Scope(common.Gateway, id))
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
				durable, resErr = bus.GetResultBody(ctx, in.js, teamster.Scope(common.Gateway, id))
				if errors.Is(resErr, jetstream.ErrMsgNotFound) {
					durable, resErr = nil, nil
				}
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
