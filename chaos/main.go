// Command chaos is teamster's reliability suite (`make chaos`). For each
// scenario it starts a fresh fleet of real processes — a nats-server built
// from the module's own nats-server dependency, with JetStream on a file
// store (or a three-node cluster of them); a redis-server without
// persistence (or a Sentinel set, or a Redis Cluster, from the same
// binary); cmd/router; three worker processes hosting the scripted
// harness (internal/testworker: cmd/worker's command with the test hook
// --ledger), all recording their runs (start, every step, end) in one ledger
// file — drives load through the client package, injects one fault (kill
// -9, SIGSTOP, a Redis or NATS restart, a partition through a TCP proxy the
// suite controls, a rolling drain, a Sentinel or Cluster failover that
// loses acknowledged writes, a slot migration, the loss of the NATS node
// leading the attempts stream), and
// then checks docs/PROTOCOL.md's guarantees against the ledger and every result:
//
//   - exactly one terminal result per accepted attempt: every result event
//     on its replyTo, the client Handle's result and the durable result
//     agree, and one exists within a bound (attempts use the default
//     queueTimeoutMs, so a stranded attempt is lost, not a late timeout);
//   - no two runs of one session overlap (scripted.CheckSteps, plus
//     scripted.CheckLedger where a run's recorded end can be trusted);
//   - no claimed attempt ran twice (scripted.CheckReplays);
//   - each session's turns started in the order the client got their
//     accepted replies;
//   - fenced: the session record carries the fence of the last committed
//     turn; a paused worker's fence never lands there; after Redis lost its
//     data no fence of an old epoch is used or stored;
//   - only the result codes the fault explains; a router never answers
//     fallback while workers run;
//   - the fleet serves a fresh attempt within a stated recovery time after
//     the fault ends.
//
// It prints a table, one row per scenario, with each scenario's notes and
// problems below it, and exits 1 when any scenario broke a guarantee, 2 when
// a scenario could not be run at all. Everything stops by itself: loads,
// waits and retries are bounded in count and time.
//
//	go run ./chaos                      # every scenario, full size (~5 min)
//	go run ./chaos -short               # the CI subset: every scenario, small (~3 min)
//	go run ./chaos -scenario worker-pause,redis-restart -v -keep
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		short   = flag.Bool("short", false, "the CI subset: smaller load, one fault per scenario")
		only    = flag.String("scenario", "", "run only these scenarios (comma-separated names; see -list)")
		list    = flag.Bool("list", false, "list the scenarios and exit")
		keep    = flag.Bool("keep", false, "keep the work directory (logs, configs, ledgers) even when every scenario passes")
		dir     = flag.String("dir", "", "work directory (default: a new temporary directory)")
		binDir  = flag.String("bin", "", "use router, testworker (go build ./internal/testworker) and nats-server already built in this directory")
		verbose = flag.Bool("v", false, "print progress to stderr")
		timeout = flag.Duration("timeout", 0, "stop everything after this long (default 40m, 12m with -short)")
	)
	flag.Parse()

	all := scenarios()
	byName := map[string]*scenario{}
	for _, sc := range all {
		byName[sc.name] = sc
	}
	if *list {
		for _, sc := range all {
			fmt.Printf("%-22s %s\n", sc.name, sc.what)
		}
		return 0
	}
	cfg, mode := fullConfig(), "full"
	if *short {
		cfg, mode = shortConfig(), "short"
	}
	var chosen []*scenario
	if *only != "" {
		for _, name := range strings.Split(*only, ",") {
			sc, ok := byName[strings.TrimSpace(name)]
			if !ok {
				fmt.Fprintf(os.Stderr, "chaos: no scenario %q (see -list)\n", name)
				return 2
			}
			chosen = append(chosen, sc)
		}
	} else {
		chosen = all
	}
	if *timeout == 0 {
		*timeout = 40 * time.Minute
		if *short {
			*timeout = 12 * time.Minute
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	base := *dir
	if base == "" {
		var err error
		if base, err = os.MkdirTemp("", "teamster-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
	} else if err := os.MkdirAll(base, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	started := time.Now()
	bins := binaries{dir: *binDir}
	if *binDir == "" {
		var err error
		fmt.Fprintln(os.Stderr, "chaos: building cmd/router, internal/testworker and nats-server")
		if bins, err = buildBinaries(ctx, filepath.Join(base, "bin")); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
	}
	built := time.Since(started)

	var rows []*row
	for _, sc := range chosen {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "chaos: %s: %s\n", sc.name, sc.what)
		r := runScenario(ctx, cfg, bins, sc, base, *verbose)
		verdict := "pass"
		if r.failed() {
			verdict = "FAIL"
		}
		fmt.Fprintf(os.Stderr, "chaos: %s: %s (%s)\n", sc.name, verdict, r.took.Round(time.Second))
		rows = append(rows, r)
	}

	var out io.Writer = os.Stdout
	report, err := os.Create(filepath.Join(base, "report.txt"))
	if err == nil {
		defer report.Close()
		out = io.MultiWriter(os.Stdout, report)
	}
	fmt.Fprintf(out, "\nteamster chaos suite, %s (%d sessions, %d fault round(s) per scenario, lease TTL %s unless noted, 3 workers); build %s, total %s\n\n",
		mode, cfg.sessions, cfg.rounds, cfg.leaseTTL, built.Round(time.Second), time.Since(started).Round(time.Second))
	printTable(out, rows, byName)

	code := 0
	for _, r := range rows {
		switch {
		case r.infra != nil:
			code = max(code, 2)
		case r.failed():
			code = max(code, 1)
		}
	}
	if len(rows) < len(chosen) {
		fmt.Printf("stopped before %d scenario(s) ran: %v\n", len(chosen)-len(rows), ctx.Err())
		code = 2
	}
	if code == 0 && !*keep && *dir == "" {
		os.RemoveAll(base)
	} else {
		fmt.Printf("work directory (report.txt; per scenario: logs, worker configs, ledger.jsonl, attempts.jsonl): %s\n", base)
	}
	return code
}
