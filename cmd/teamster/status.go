package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/leases"
)

// fleetStatus is what `teamster status` shows; its JSON is -o json.
type fleetStatus struct {
	Routers []routerStatus `json:"routers"`
	Workers []workerStatus `json:"workers"`
	Queues  []queueStatus  `json:"queues"`
	// InFlight is the attempts in the reaper index (queued, running, or
	// finished and being delivered); nil when Redis could not be read.
	InFlight *int64 `json:"inFlight,omitempty"`
	// Policies is how many different runtime policies the routers run;
	// more than one is a mismatch.
	Policies int `json:"policies"`
	// Errors lists what could not be read (the rest is still shown).
	Errors []string `json:"errors,omitempty"`
}

type routerStatus struct {
	ID           string `json:"routerId"`
	Version      string `json:"version,omitempty"`
	PolicyDigest string `json:"policyDigest"`
	StartedAt    string `json:"startedAt"`
	UptimeMs     int64  `json:"uptimeMs"`
	HeartbeatAt  string `json:"heartbeatAt"`
}

type workerStatus struct {
	ID        string   `json:"workerId"`
	State     string   `json:"state"`
	Harnesses []string `json:"harnesses"`
	Slots     int      `json:"slots"`
	// Running are the attempts the worker runs, as it answered now (or, when
	// it did not answer, as its last heartbeat said: Answered false).
	Running     []string `json:"running"`
	Answered    bool     `json:"answered"`
	Version     string   `json:"version,omitempty"`
	StartedAt   string   `json:"startedAt"`
	HeartbeatAt string   `json:"heartbeatAt"`
}

type queueStatus struct {
	Harness string `json:"harness"`
	// Waiting is every attempt not yet claimed: Undelivered (no worker has
	// fetched it: no free slot) plus Held (fetched, waiting behind an
	// earlier turn of its session, or being claimed now).
	Waiting     uint64 `json:"waiting"`
	Undelivered uint64 `json:"undelivered"`
	Held        uint64 `json:"held"`
}

// statusRequestTimeout bounds each read of status on its own, so that one
// slow worker or stream does not use up the others' time.
const statusRequestTimeout = 3 * time.Second

func statusCmd(common *cmdutil.Common) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "What the fleet is doing",
		Long: `status shows the routers (version, the digest of the runtime policy they
select with, uptime), the workers (state, harnesses, running attempts out of
their slots, as each answers now), the attempts waiting per harness, and how
many attempts are in flight in Redis. Each read has its own timeout (3 s).

WAITING per harness is every attempt not yet claimed: UNDELIVERED (no worker
has fetched it: no free slot) and HELD (fetched, waiting behind an earlier
turn of its session).

Exit codes: 0 everything read and consistent; 1 something could not be read
(a worker that does not answer, NATS or Redis down: what could be read is
still shown) or the routers run different runtime policies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON = asJSON || outputJSON()
			nc, err := cliConn(common)
			if err != nil {
				return &exitError{1, err}
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return &exitError{1, err}
			}
			st := readStatus(common, nc, js)
			if asJSON {
				printJSON(cmd.OutOrStdout(), st)
			} else {
				printStatus(cmd.OutOrStdout(), st)
			}
			var problems []string
			if st.Policies > 1 {
				problems = append(problems, fmt.Sprintf("the routers run %d different runtime policies", st.Policies))
			}
			problems = append(problems, st.Errors...)
			if len(problems) > 0 {
				return &exitError{1, errors.New(strings.Join(problems, "; "))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	_ = cmd.Flags().MarkHidden("json") // -o json says it for every command
	return cmd
}

// readStatus reads every section, each under its own timeout, the workers'
// control requests concurrently.
func readStatus(common *cmdutil.Common, nc *nats.Conn, js jetstream.JetStream) *fleetStatus {
	st := &fleetStatus{Routers: []routerStatus{}, Workers: []workerStatus{}, Queues: []queueStatus{}}
	var mu sync.Mutex
	fail := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		st.Errors = append(st.Errors, fmt.Sprintf("%s: %v", what, err))
	}
	within := func(f func(ctx context.Context)) {
		ctx, cancel := context.WithTimeout(context.Background(), statusRequestTimeout)
		defer cancel()
		f(ctx)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		within(func(ctx context.Context) {
			routers, err := bus.ReadRouters(ctx, js)
			if err != nil {
				fail("router registry (KV "+bus.BucketRouters+")", err)
				return
			}
			digests := map[string]bool{}
			for _, r := range routers {
				started := time.UnixMilli(r.StartedMs)
				st.Routers = append(st.Routers, routerStatus{ID: r.RouterID, Version: r.Version, PolicyDigest: r.PolicyDigest,
					StartedAt: stamp(started), UptimeMs: time.Since(started).Milliseconds(), HeartbeatAt: stamp(time.UnixMilli(r.HeartbeatMs))})
				digests[r.PolicyDigest] = true
			}
			st.Policies = len(digests)
		})
	})
	wg.Go(func() {
		var entries []bus.WorkerEntry
		within(func(ctx context.Context) {
			var err error
			if entries, err = bus.ReadRegistry(ctx, js); err != nil {
				fail("worker registry (KV "+bus.BucketWorkers+")", err)
			}
		})
		workers := make([]workerStatus, len(entries))
		var ww sync.WaitGroup
		for i, e := range entries {
			ws := workerStatus{ID: e.WorkerID, State: e.State, Slots: e.Slots, Version: e.Version, Running: e.Attempts,
				StartedAt: stamp(time.UnixMilli(e.StartedMs)), HeartbeatAt: stamp(time.UnixMilli(e.HeartbeatMs))}
			for _, h := range e.Harnesses {
				ws.Harnesses = append(ws.Harnesses, h.ID)
			}
			sort.Strings(ws.Harnesses)
			workers[i] = ws
			ww.Go(func() {
				within(func(ctx context.Context) {
					rep, err := control(ctx, nc, e.WorkerID, bus.ControlStatus)
					if err != nil {
						fail("worker "+e.WorkerID+" (its control subject)", err)
						return
					}
					workers[i].Running, workers[i].State, workers[i].Answered = rep.Attempts, rep.State, true
				})
			})
		}
		ww.Wait()
		for i := range workers {
			if workers[i].Running == nil {
				workers[i].Running = []string{}
			}
			sort.Strings(workers[i].Running)
		}
		mu.Lock()
		st.Workers = workers
		mu.Unlock()
	})
	wg.Go(func() {
		within(func(ctx context.Context) {
			s, err := js.Stream(ctx, bus.StreamAttempts)
			if err != nil {
				fail("attempts stream ("+bus.StreamAttempts+")", err)
				return
			}
			var queues []queueStatus
			for info := range s.ListConsumers(ctx).Info() {
				h, ok := strings.CutPrefix(info.Name, "harness_")
				if !ok {
					continue
				}
				held := uint64(info.NumAckPending)
				queues = append(queues, queueStatus{Harness: h, Waiting: info.NumPending + held, Undelivered: info.NumPending, Held: held})
			}
			sort.Slice(queues, func(i, j int) bool { return queues[i].Harness < queues[j].Harness })
			mu.Lock()
			st.Queues = append(st.Queues, queues...)
			mu.Unlock()
		})
	})
	wg.Go(func() {
		within(func(ctx context.Context) {
			rdb, err := common.Redis(ctx)
			if err != nil {
				fail("Redis", err)
				return
			}
			defer rdb.Close()
			n, err := leases.NewStore(rdb).InFlightCount(ctx)
			if err != nil {
				fail("Redis (the reaper index)", err)
				return
			}
			mu.Lock()
			st.InFlight = &n
			mu.Unlock()
		})
	})
	wg.Wait()
	sort.Strings(st.Errors)
	return st
}

func printStatus(out io.Writer, st *fleetStatus) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTER\tVERSION\tPOLICY\tUPTIME")
	for _, r := range st.Routers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, dash(r.Version), r.PolicyDigest, (time.Duration(r.UptimeMs) * time.Millisecond).Round(time.Second))
	}
	if len(st.Routers) == 0 {
		fmt.Fprintln(tw, "(no routers registered)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKER\tSTATE\tHARNESSES\tRUNNING\tVERSION\tHEARTBEAT")
	for _, w := range st.Workers {
		running := fmt.Sprintf("%d/%d", len(w.Running), w.Slots)
		if len(w.Running) > 0 {
			running += " (" + strings.Join(firstN(w.Running, 3), ", ") + ")"
		}
		if !w.Answered {
			running += " [no answer; from its heartbeat]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.State, strings.Join(w.Harnesses, ","), running, dash(w.Version), ago(w.HeartbeatAt))
	}
	if len(st.Workers) == 0 {
		fmt.Fprintln(tw, "(no workers registered)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "HARNESS\tWAITING\tUNDELIVERED\tHELD")
	for _, q := range st.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", q.Harness, q.Waiting, q.Undelivered, q.Held)
	}
	if len(st.Queues) == 0 {
		fmt.Fprintln(tw, "(no harness consumers)")
	}
	tw.Flush()
	if st.InFlight != nil {
		fmt.Fprintf(out, "\n%d attempts in flight (teamster attempts ls, teamster sessions ls)\n", *st.InFlight)
	}
	if st.Policies > 1 {
		fmt.Fprintf(out, "\nPOLICY MISMATCH: the routers run %d different runtime policies; one submit may be answered differently by each\n", st.Policies)
	}
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string{}, s[:n]...), "…")
}
