// Package monitoring holds no code: it is the directory of teamster's
// monitoring assets and of the tests that keep them honest.
//
//   - prometheus.yml: the scrape config of the compose fleet
//     (deploy/compose/compose.yaml): jobs teamster-router and
//     teamster-worker on each daemon's metrics port, and the rules below.
//   - alerts.yml: the alerting rules (targets down, no router or worker,
//     lease renew failures and leases lost, worker_lost and queue_timeout
//     results, queue backlog, slot saturation, stuck drains, a router
//     policy or build version mismatch, rejections, lost Redis writes).
//   - teamster-dashboard.json: a Grafana dashboard over those jobs, with
//     its Prometheus datasource as the variable ${datasource}.
//   - grafana/: Grafana provisioning for compose (the Prometheus datasource
//     and a provider that loads the dashboard).
//
// The tests run promtool on the rules and the scrape config, then start a
// whole fleet in process (internal/fleettest), drive traffic through it,
// scrape it with a real Prometheus, and query every expression of the
// dashboard and of the rules: each must return series, so that a panel or
// an alert naming a metric or label the daemons do not export fails here
// rather than staying silently empty.
package monitoring
