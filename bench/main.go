// Command bench measures teamster against the physical floor of its own hops,
// in one run (`make bench`; the issue "Performance: measured against the
// physical floor").
//
// It starts a private redis-server and an embedded NATS server with
// JetStream, a router and two workers in this process (internal/fleet, the
// one fleet assembly the tests, chaos and `teamster dev` use too), drives them with the scripted
// harness's no-op (echo) turn, and measures:
//
//   - the floor of this machine: JetStream publish-with-ack, pull-and-ack of
//     one message, one Redis script round trip, one core NATS request-reply;
//   - teamster: submit→result latency with one attempt in flight, and its
//     ratio to the sum of the floor hops the flow is made of; throughput with
//     1, 64 and 1,024 sessions in flight, checking exactly one result each;
//   - lease renewal with 10,000 leases in one leases.Keeper: round trips and
//     CPU per renewal interval;
//   - a claim's redis-server CPU and script time, a session's first (a new
//     fence epoch) and a later turn's (bench/claim.go);
//   - memory of the real worker binary (a child process): idle, and with
//     10,000 sleeping turns in flight;
//   - inject latency: request to the harness's dispatch, by attempt id, by
//     session key, and source-bound under the gateway's own assertion (the
//     worker's assertCurrent round trip to the gateway); a bench-only
//     "probe" harness timestamps the dispatch;
//   - the largest throughput row again on a Redis Sentinel set and on a
//     Redis Cluster (internal/redisproc), each with a fresh NATS server and
//     fleet, after the standalone fleet has stopped (bench/topology.go).
//
// It prints one table to stdout, progress to stderr, and writes the same rows
// as JSON (default bench/results.json). Every figure is measured in the run;
// the acceptance goals of the issue are checked next to them. The exit code
// is 0 when every scenario ran, whether or not the goals passed (see
// -fail-on-goal).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof" // -debug-addr
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	var (
		out        = flag.String("out", "bench/results.json", "write the results as JSON to this file")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile of the last throughput window (1,024 sessions by default) to this file")
		latProfile = flag.String("latency-cpuprofile", "", "write a CPU profile of the sequential latency pass to this file")
		window     = flag.Duration("window", 10*time.Second, "throughput window per session count")
		warm       = flag.Duration("warm", 2*time.Second, "warm-up before each throughput window")
		latencyN   = flag.Int("latency-n", 2000, "sequential turns for the latency figures (after 200 warm-up)")
		floorN     = flag.Int("floor-n", 2000, "iterations per floor hop (after 200 warm-up)")
		injectN    = flag.Int("inject-n", 1000, "injects per kind: by attemptId, by sessionKey, under the gateway's assertion (after 50 warm-up each)")
		leasesN    = flag.Int("leases", 10000, "leases held for the renewal figures")
		renewN     = flag.Int("renew-rounds", 30, "RenewNow rounds the renewal CPU is averaged over")
		claimN     = flag.Int("claims", 2000, "claims in a row of each kind (a session's first, a later turn's) for the claim figures")
		memTurns   = flag.Int("mem-turns", 10000, "sleeping turns for the memory figures")
		sessions   = flag.String("sessions", "1,64,1024", "session counts of the throughput runs")
		slots      = flag.Int("slots", 0, "slots of each of the two measured workers; 0: enough for the largest session count to run at once (half of it each, at least the worker default of 64)")
		workerBin  = flag.String("worker-bin", "", "worker binary for the memory scenario; default: go build ./cmd/worker")
		only       = flag.String("only", "", "run only these scenarios (comma-separated: renew,claim,floor,latency,throughput,flowfloor,inject,memory,topology; and resultsmem, which runs only when named)")
		topologies = flag.String("topologies", "sentinel,cluster", "replicated Redis topologies of the topology scenario (comma-separated: sentinel, cluster); it runs the largest session count on each, with -warm and -window")
		resultsN   = flag.Int("results-n", 200000, "results the resultsmem scenario stores")
		failOnGoal = flag.Bool("fail-on-goal", false, "exit 1 when a goal fails")
		debugAddr  = flag.String("debug-addr", "", "serve net/http/pprof on this address while running, e.g. 127.0.0.1:6060")
	)
	flag.Parse()
	if *debugAddr != "" {
		go func() { fatal(http.ListenAndServe(*debugAddr, nil)) }()
	}
	named := func(s string) bool { return strings.Contains(","+*only+",", ","+s+",") }
	want := func(s string) bool { return *only == "" || named(s) }
	counts, err := parseCounts(*sessions)
	if err != nil {
		fatal(err)
	}
	topos, err := parseTopologies(*topologies)
	if err != nil {
		fatal(err)
	}

	started := time.Now()
	ctx := context.Background()
	var rows []Row
	dir, err := os.MkdirTemp("", "teamster-bench-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)

	progress("starting redis-server")
	srv, err := startRedis(dir)
	if err != nil {
		fatal(err)
	}
	defer srv.close()
	env := environment(ctx, srv)

	if want("renew") {
		r, err := measureRenewal(ctx, srv, *leasesN, *renewN)
		if err != nil {
			fatalClose(srv, err)
		}
		rows = append(rows, r...)
	}

	if want("claim") {
		r, err := measureClaims(ctx, srv.redisURL(), *claimN)
		if err != nil {
			fatalClose(srv, err)
		}
		rows = append(rows, r...)
	}

	progress("starting the embedded NATS server")
	if err := srv.startNATS(); err != nil {
		fatalClose(srv, err)
	}
	var fl *floor
	if want("floor") || want("latency") {
		var r []Row
		fl, r, err = measureFloor(ctx, srv, *floorN, 200)
		if err != nil {
			fatalClose(srv, err)
		}
		rows = append(rows, r...)
	}

	workerSlots := *slots
	if workerSlots <= 0 {
		workerSlots = fleetSlots(counts[len(counts)-1], 2)
	}
	progress("starting the fleet: router, 2 workers (%d slots each), probe worker", workerSlots)
	f, err := startFleet(ctx, srv, 2, workerSlots)
	if err != nil {
		fatalClose(srv, err)
	}
	// teamster's one-in-flight latency and its largest throughput row, for
	// the comparison with the flow floor.
	var latencyRow, throughputRow *Row
	if want("latency") {
		r, err := measureLatency(ctx, f, fl, *latencyN, 200, *latProfile)
		if err != nil {
			fatalFleet(f, srv, err)
		}
		rows = append(rows, r...)
		latencyRow = &r[0] // submit→result
	}
	if want("throughput") {
		for i, n := range counts {
			profile := ""
			if n == counts[len(counts)-1] {
				profile = *cpuprofile
			}
			tr, err := measureThroughput(ctx, f, i, n, *warm, *window, profile)
			if err != nil {
				fatalFleet(f, srv, err)
			}
			row := tr.row()
			rows = append(rows, row)
			throughputRow = &row
		}
	}
	// The topology rows go here, beside the throughput rows, though they
	// run last.
	topologyAt := len(rows)
	if want("flowfloor") {
		// The contract's flow with none of teamster's work: what any
		// implementation of it pays on this machine, one flow at a time and
		// at the largest session count (bench/flowfloor.go).
		n := counts[len(counts)-1]
		p, err := samplePayloads(ctx, f)
		if err != nil {
			fatalFleet(f, srv, err)
		}
		type run struct {
			sessions int
			mode     flowRedis
		}
		runs := []run{{1, flowNoRedis}, {1, flowRedisAlone}}
		if n > 1 {
			runs = append(runs, run{n, flowNoRedis}, run{n, flowRedisAlone}, run{n, flowRedisBatched})
		}
		var oneAlone, manyBatched *Row
		for _, r := range runs {
			row, err := measureFlowFloor(ctx, f, p, r.sessions, r.mode, *warm, *window)
			if err != nil {
				fatalFleet(f, srv, err)
			}
			rows = append(rows, row)
			switch {
			case r.sessions == 1 && r.mode == flowRedisAlone:
				oneAlone = &row
			case r.mode == flowRedisBatched:
				manyBatched = &row
			}
		}
		rows = append(rows, flowFloorRatios(fl, latencyRow, oneAlone, throughputRow, manyBatched, n)...)
	}
	if want("inject") {
		r, err := measureInject(ctx, f, *injectN, 50)
		if err != nil {
			fatalFleet(f, srv, err)
		}
		rows = append(rows, r...)
	}
	if named("resultsmem") {
		r, err := measureResultsMemory(ctx, *resultsN)
		if err != nil {
			fatalFleet(f, srv, err)
		}
		rows = append(rows, r...)
	}
	if want("memory") {
		r, err := measureMemory(ctx, f, *memTurns, *workerBin)
		if err != nil {
			fatalFleet(f, srv, err)
		}
		rows = append(rows, r...)
	}
	progress("stopping the fleet")
	f.close()
	srv.close()
	if want("topology") && len(topos) > 0 {
		var topoRows []Row
		for _, mode := range topos {
			r, err := measureTopology(ctx, dir, mode, counts[len(counts)-1], workerSlots, *warm, *window)
			if err != nil {
				fatal(err)
			}
			if throughputRow != nil && throughputRow.Value != nil && *throughputRow.Value > 0 && r.Value != nil {
				r.Note = fmt.Sprintf("%.2f of the standalone row's attempts/s in this run; ", *r.Value / *throughputRow.Value) + r.Note
			}
			topoRows = append(topoRows, r)
		}
		rows = slices.Insert(rows, topologyAt, topoRows...)
	}
	env["loadavg-end"] = loadAvg()
	if busy := machineBusy(); busy != "" {
		progress("WARNING: %s; the figures are polluted by other processes", busy)
		env["warning"] = busy
	}

	printTable(os.Stdout, rows)
	res := Results{Started: started, Duration: time.Since(started).Round(time.Millisecond).String(), Env: env, Rows: rows, Failed: failedGoals(rows)}
	if err := writeJSON(*out, res); err != nil {
		fatal(err)
	}
	progress("done in %s; wrote %s; goals failed: %d (%s)", res.Duration, *out, len(res.Failed), strings.Join(res.Failed, "; "))
	if *failOnGoal && len(res.Failed) > 0 {
		os.Exit(1)
	}
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(p), "%d", &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-sessions: %q is not a positive count", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// environment describes the machine and servers the figures come from.
func environment(ctx context.Context, srv *servers) map[string]string {
	env := map[string]string{
		"go":          runtime.Version(),
		"goos/goarch": runtime.GOOS + "/" + runtime.GOARCH,
		"cpus":        fmt.Sprint(runtime.NumCPU()),
		"gomaxprocs":  fmt.Sprint(runtime.GOMAXPROCS(0)),
		"nats-server": server.VERSION + " (embedded, file store in a temp dir)",
		"cpu":         cpuModel(),
		"loadavg":     loadAvg(),
	}
	if rdb, err := newRedis(srv.redisURL(), nil); err == nil {
		if info, err := rdb.Info(ctx, "server").Result(); err == nil {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					env["redis-server"] = v + " (hash-max-listpack-value 1024, as deploy/compose runs it)"
				}
			}
		}
		rdb.Close()
	}
	return env
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// machineBusy says so when the 5-minute load average was above the number of
// CPUs during the run: other processes competed for the cores.
func machineBusy() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	var l1, l5 float64
	if _, err := fmt.Sscanf(string(b), "%f %f", &l1, &l5); err != nil {
		return ""
	}
	if l5 > float64(runtime.NumCPU()) {
		return fmt.Sprintf("5-minute load average %.1f on %d CPUs", l5, runtime.NumCPU())
	}
	return ""
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func fatalClose(srv *servers, err error) {
	srv.close()
	fatal(err)
}

func fatalFleet(f *fleet, srv *servers, err error) {
	f.close()
	fatalClose(srv, err)
}
