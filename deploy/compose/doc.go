// Package compose holds no code: it is the directory of teamster's deployment
// files (compose.yaml, the NATS cluster and accounts configs, the Sentinel
// config template, the worker configs) and of the tests that keep them
// honest. Those tests load the shipped NATS permissions into an in-process
// server and check every principal against them, run the real router,
// workers and gateway client under them, check that compose.yaml refers only
// to files that exist and that its Redis data nodes, Sentinels and daemons
// agree on names and passwords, check the fencing inequality of
// docs/ARCHITECTURE.md with the shipped timings, and run the shipped Redis
// and Sentinel settings through a failover.
package compose
