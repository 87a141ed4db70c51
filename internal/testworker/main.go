// Command testworker is cmd/worker with one test hook: --ledger, where the
// scripted harness appends its run records (start, every step, end) for
// the suites that run worker processes and check their runs against that
// ledger: chaos and internal/e2e's TestProcesses. It is built by those
// suites, never by `make build`, so the production worker has no such
// flag.
package main

import (
	"github.com/spf13/pflag"

	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/internal/workercmd"
	"github.com/teamster-fleet/teamster/worker"
)

func main() {
	var ledgerPath string
	workercmd.Main(workercmd.TestHooks{
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&ledgerPath, "ledger", "", "append the scripted harness's run records to this file")
		},
		Env: func() (worker.FactoryEnv, func(), error) {
			if ledgerPath == "" {
				return worker.FactoryEnv{}, func() {}, nil
			}
			l, err := scripted.NewFileLedger(ledgerPath)
			if err != nil {
				return worker.FactoryEnv{}, nil, err
			}
			return worker.FactoryEnv{Ledger: l}, func() { l.Close() }, nil
		},
	})
}
