// Command worker runs a teamster worker: it hosts the harnesses of its config
// file, claims attempts under Redis session leases and runs them. Its
// command is internal/workercmd's, without test hooks.
package main

import "github.com/teamster-fleet/teamster/internal/workercmd"

func main() { workercmd.Main(workercmd.TestHooks{}) }
