// Package compose holds no code: it is the directory of teamster's deployment
// files (compose.yaml, the NATS cluster and accounts configs, the worker
// configs) and of the tests that keep them honest. Those tests load the
// shipped NATS permissions into an in-process server and check every
// principal against them, run the real router, workers and gateway client
// under them, and check that compose.yaml refers only to files that exist.
package compose
