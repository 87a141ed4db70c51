// Package metrics defines the Prometheus metrics of the router and the worker
// and serves /metrics, /healthz and /readyz. Collectors are registered on the
// Registerer the caller passes, never on a global.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "teamster"

// Router is the router's metrics.
type Router struct {
	Submitted *prometheus.CounterVec // by status: accepted, fallback, rejected
	Rejected  *prometheus.CounterVec // by code
	Reaped    *prometheus.CounterVec // by outcome
	Resent    prometheus.Counter     // result events sent for a marker that did not confirm sending
	Adopted   prometheus.Counter     // records made to agree with the durable result
	NodeMarks prometheus.Counter     // slots whose Redis node the routers saw change
	Injected  *prometheus.CounterVec // inject requests routed, by outcome
	// Unanswerable counts requests dropped unanswered because their reply
	// subject lies outside the sender's own inbox.
	Unanswerable prometheus.Counter
	// Queue is the attempts waiting per harness and state (QueueUndelivered,
	// QueueHeld); one router at a time exports it (router/heartbeat.go).
	Queue *prometheus.GaugeVec
	// Policy is 1, labelled with the digest of the runtime policy the
	// router selects with.
	Policy *prometheus.GaugeVec
}

// The states of teamster_queue_attempts.
const (
	// QueueUndelivered attempts are in the stream, fetched by no worker yet
	// (no free slot on a worker hosting the harness).
	QueueUndelivered = "undelivered"
	// QueueHeld attempts were delivered and wait for their session's earlier
	// turn to end (or are being claimed right now).
	QueueHeld = "held"
)

// Label values every router and worker exports from the start, so that
// dashboards and alert rules find series before the first event.
var (
	submitStatuses = []string{"accepted", "fallback", "rejected"}
	rejectCodes    = []string{"invalid_request", "payload_too_large", "harness_not_registered", "harness_unsupported_route",
		"delegation_denied", "owner_only", "internal"}
	reapOutcomes   = []string{"queue_timeout", "worker_lost"}
	resultStatuses = []string{"ok", "error", "cancelled", "timeout"}
)

// NewRouter registers the router's metrics on reg.
func NewRouter(reg prometheus.Registerer) *Router {
	f := factory(reg)
	r := &Router{
		Submitted: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "attempts_submitted_total",
			Help: "Submits answered, by reply status (accepted, fallback, rejected)."}, []string{"status"}),
		Rejected: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "attempts_rejected_total",
			Help: "Submits rejected, by error code."}, []string{"code"}),
		Reaped: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "attempts_reaped_total",
			Help: "Results the reaper published, by outcome (queue_timeout, worker_lost, or a worker's outcome republished)."}, []string{"outcome"}),
		Resent: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "result_events_resent_total",
			Help: "Result events the reaper sent because their marker (a worker or another reaper) did not confirm sending them within the send window: it died or stalled after publishing the result."}),
		Adopted: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "outcomes_adopted_total",
			Help: "Attempt records the reaper made agree with the attempt's durable result, because the recorded outcome was another (writes lost in a Redis failover)."}),
		NodeMarks: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "redis_slot_node_changes_total",
			Help: "Hash slots whose serving Redis node the router saw change (a failover, restart or data loss): their sessions' next fence epochs wait the quarantine."}),
		Injected: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "injections_total",
			Help: "Inject requests the router routed, by outcome (accepted or an error code)."}, []string{"outcome"}),
		Unanswerable: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "router", Name: "requests_unanswerable_total",
			Help: "Requests the router dropped without acting on them because their reply subject lies outside the sender's own inbox (_INBOX.gateway.<id> for a gateway, _INBOX.delegate.<id>.<pluginId> for a delegate bound to it, _INBOX for the unnamed tenant): a router never publishes anywhere else on a sender's behalf."}),
		Queue: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "queue_attempts",
			Help: "Attempts waiting, by harness and state: undelivered (fetched by no worker yet: no free slot) or held (delivered, waiting behind an earlier turn of their session). Exported by one router at a time, the live router with the lowest id, so sums across routers are the fleet's figure."},
			[]string{"harness", "state"}),
		Policy: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "router", Name: "policy_info",
			Help: "Always 1; its label is the digest of the runtime policy the router selects with. Routers with different digests answer one submit differently."},
			[]string{"digest"}),
	}
	for _, s := range submitStatuses {
		r.Submitted.WithLabelValues(s)
	}
	for _, c := range rejectCodes {
		r.Rejected.WithLabelValues(c)
	}
	for _, o := range reapOutcomes {
		r.Reaped.WithLabelValues(o)
	}
	return r
}

// Hosting gives the per-harness series of a worker's hosted harness their
// zero values, so that they exist before its first attempt.
func (w *Worker) Hosting(harnessID string) {
	w.Claimed.WithLabelValues(harnessID)
	w.ClaimWait.WithLabelValues(harnessID)
	w.RunDuration.WithLabelValues(harnessID)
	for _, s := range resultStatuses {
		w.Finished.WithLabelValues(harnessID, s)
	}
}

// Worker is the worker's metrics.
type Worker struct {
	Claimed      *prometheus.CounterVec   // by harness
	Finished     *prometheus.CounterVec   // by harness, status
	ClaimWait    *prometheus.HistogramVec // acceptance to claim, by harness
	RunDuration  *prometheus.HistogramVec // claim to result, by harness
	RenewFailed  prometheus.Counter
	LeasesLost   prometheus.Counter
	Injections   *prometheus.CounterVec // by outcome
	State        *prometheus.GaugeVec   // 1 for the current state
	SlotsTotal   prometheus.Gauge
	SlotsUsed    prometheus.Gauge
	LeasesHeld   prometheus.Gauge
	RenewRounds  prometheus.Counter
	RenewLatency prometheus.Histogram
}

// Buckets for waits and runs: 1 ms to ~30 min.
var durationBuckets = prometheus.ExponentialBuckets(0.001, 4, 12)

// NewWorker registers the worker's metrics on reg.
func NewWorker(reg prometheus.Registerer) *Worker {
	f := factory(reg)
	return &Worker{
		Claimed: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "worker", Name: "attempts_claimed_total",
			Help: "Attempts claimed under a lease, by harness."}, []string{"harness"}),
		Finished: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "worker", Name: "attempts_finished_total",
			Help: "Attempts this worker published a result for, by harness and status."}, []string{"harness", "status"}),
		ClaimWait: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "worker", Name: "claim_wait_seconds",
			Help: "Time from acceptance to claim (queue wait, including time behind earlier turns).", Buckets: durationBuckets}, []string{"harness"}),
		RunDuration: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "worker", Name: "run_duration_seconds",
			Help: "Time from claim to result.", Buckets: durationBuckets}, []string{"harness"}),
		RenewFailed: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "worker", Name: "lease_renew_failures_total",
			Help: "Lease renewal rounds that failed (Redis did not answer)."}),
		LeasesLost: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "worker", Name: "leases_lost_total",
			Help: "Leases lost: refused by Redis or self-fenced."}),
		Injections: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "worker", Name: "injections_total",
			Help: "Injected items, by outcome (accepted, committed, cancelled, rejected, or a refusal code)."}, []string{"outcome"}),
		State: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "worker", Name: "state",
			Help: "1 for the worker's current lifecycle state."}, []string{"state"}),
		SlotsTotal: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "worker", Name: "slots",
			Help: "Run slots."}),
		SlotsUsed: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "worker", Name: "slots_used",
			Help: "Run slots in use: attempts this worker runs (claimed, not yet delivered)."}),
		LeasesHeld: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "worker", Name: "leases_held",
			Help: "Session leases held."}),
		RenewRounds: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "worker", Name: "lease_renew_rounds_total",
			Help: "Lease renewal rounds (one pipelined round trip each)."}),
		RenewLatency: f.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "worker", Name: "lease_renew_seconds",
			Help: "Duration of a renewal round.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
	}
}

// SetState sets the state gauge: 1 for state, 0 for the others.
func (w *Worker) SetState(state string, all []string) {
	for _, s := range all {
		v := 0.0
		if s == state {
			v = 1
		}
		w.State.WithLabelValues(s).Set(v)
	}
}

// factory registers on reg, or on nothing when reg is nil.
type regFactory struct{ reg prometheus.Registerer }

func factory(reg prometheus.Registerer) regFactory { return regFactory{reg} }

func (f regFactory) register(c prometheus.Collector) {
	if f.reg != nil {
		f.reg.MustRegister(c)
	}
}

func (f regFactory) NewCounterVec(o prometheus.CounterOpts, l []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(o, l)
	f.register(c)
	return c
}

func (f regFactory) NewCounter(o prometheus.CounterOpts) prometheus.Counter {
	c := prometheus.NewCounter(o)
	f.register(c)
	return c
}

func (f regFactory) NewGauge(o prometheus.GaugeOpts) prometheus.Gauge {
	c := prometheus.NewGauge(o)
	f.register(c)
	return c
}

func (f regFactory) NewGaugeVec(o prometheus.GaugeOpts, l []string) *prometheus.GaugeVec {
	c := prometheus.NewGaugeVec(o, l)
	f.register(c)
	return c
}

func (f regFactory) NewHistogram(o prometheus.HistogramOpts) prometheus.Histogram {
	c := prometheus.NewHistogram(o)
	f.register(c)
	return c
}

func (f regFactory) NewHistogramVec(o prometheus.HistogramOpts, l []string) *prometheus.HistogramVec {
	c := prometheus.NewHistogramVec(o, l)
	f.register(c)
	return c
}

// ReadyFunc reports why the process is not ready, nil when it is.
type ReadyFunc func(ctx context.Context) error

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Serve starts the HTTP server on addr (host:port; ":0" picks a port).
// /healthz answers 200 while the process serves; /readyz runs ready (bounded
// by 2 s) and answers 200 "ready" or 503 with the reason.
func Serve(addr string, g prometheus.Gatherer, ready ReadyFunc) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
