package compose

import (
	"strconv"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster/worker"
)

// The terms of the fencing inequality that are not settings of these files
// (docs/ARCHITECTURE.md, "Fencing across failovers").
const (
	// rho is the largest clock rate drift between a worker and a Redis
	// node: a hundred times a bad quartz's.
	rho = 1e-3
	// pauseBound is P: the longest a run may still act after its worker's
	// self-fence fired.
	pauseBound = 1900 * time.Millisecond
	// redisDefaultMaxLag is min-replicas-max-lag when it is not set.
	redisDefaultMaxLag = 10
)

// TestFencingInequality reads the shipped timing settings and checks that
// no two holders of a session's lease can overlap across a Redis failover:
//
//	A + (T − m)(1 + ρ) + P  <  D + Q(1 − ρ)
//
// T is a worker's leaseTtlMs, m its self-fence margin (T/5, leases.Keeper's
// default; the worker config does not set it), Q its newEpochQuarantineMs
// (default T; -1 is none), D the Sentinels' down-after-milliseconds (the
// election after it only adds to D), and A how long a cut-off primary goes
// on accepting writes: min-replicas-max-lag + 2 s, which needs
// min-replicas-to-write (without it A has no bound). The old holder and the
// new one may be different workers, so the left side takes the largest
// T − m of the fleet and the right side the smallest Q; A the largest of
// any data node (any may be the primary), D the smallest of any Sentinel.
func TestFencingInequality(t *testing.T) {
	c := loadCompose(t)
	rs := c.redisSet(t)

	// T − m and Q, over the workers compose runs.
	var (
		holdMax     time.Duration // the largest T − m
		quarantine  time.Duration // the smallest Q
		holdFrom    string
		quarantined string
	)
	for i, name := range c.byRole("worker") {
		svc := c.Services[name]
		local, ok := svc.mountOf(svc.Environment["TEAMSTER_WORKER_CONFIG"])
		if !ok {
			t.Fatalf("%s: TEAMSTER_WORKER_CONFIG is not a bind-mounted file", name)
		}
		cfg, err := worker.LoadConfig(local)
		if err != nil {
			t.Fatal(err)
		}
		ttl := cfg.LeaseTTL()
		margin := ttl / 5 // leases.Keeper's default, the worker's margin
		q := cfg.NewEpochQuarantine()
		switch {
		case q == 0:
			q = ttl // the default
		case q < 0:
			q = 0 // -1: none
		}
		t.Logf("%s (%s): T %s, m %s, Q %s", name, local, ttl, margin, q)
		if hold := ttl - margin; i == 0 || hold > holdMax {
			holdMax, holdFrom = hold, name
		}
		if i == 0 || q < quarantine {
			quarantine, quarantined = q, name
		}
	}
	if holdFrom == "" {
		t.Fatal("no workers")
	}

	// A, over the data nodes.
	var a time.Duration
	var aFrom string
	for _, name := range sortedKeys(rs.nodes) {
		n := rs.nodes[name]
		toWrite, err := strconv.Atoi(n.settings.value("min-replicas-to-write"))
		if err != nil || toWrite < 1 {
			t.Fatalf("%s: no --min-replicas-to-write (at least 1): a primary cut off from its replicas goes on accepting writes for as long as the cut lasts, so A, and the inequality, have no bound", name)
		}
		lag := redisDefaultMaxLag
		if v := n.settings.value("min-replicas-max-lag"); v != "" {
			if lag, err = strconv.Atoi(v); err != nil || lag < 1 {
				t.Fatalf("%s: --min-replicas-max-lag %q: 0 turns min-replicas-to-write off", name, v)
			}
		}
		// Replicas acknowledge once a second and the primary recounts its
		// good replicas once a second.
		if na := time.Duration(lag)*time.Second + 2*time.Second; na > a {
			a, aFrom = na, name
		}
	}

	// D, over the Sentinels.
	var d time.Duration
	var dFrom string
	master := rs.master(t)
	for _, name := range sortedKeys(rs.sentinels) {
		ms, err := strconv.Atoi(rs.sentinels[name].settings.sentinelOf("down-after-milliseconds", master))
		if err != nil {
			t.Fatalf("%s: no sentinel down-after-milliseconds %s", name, master)
		}
		if nd := time.Duration(ms) * time.Millisecond; dFrom == "" || nd < d {
			d, dFrom = nd, name
		}
	}

	sec := func(d time.Duration) float64 { return d.Seconds() }
	left := sec(a) + sec(holdMax)*(1+rho) + sec(pauseBound)
	right := sec(d) + sec(quarantine)*(1-rho)
	t.Logf("A = min-replicas-max-lag + 2 s = %.3f s (%s); T − m = %.3f s (%s); ρ = %g; P = %.3f s", sec(a), aFrom, sec(holdMax), holdFrom, rho, sec(pauseBound))
	t.Logf("D = down-after-milliseconds = %.3f s (%s); Q = %.3f s (%s)", sec(d), dFrom, sec(quarantine), quarantined)
	rel := "<"
	if left >= right {
		rel = "≥"
	}
	t.Logf("A + (T − m)(1 + ρ) + P = %.3f s  %s  D + Q(1 − ρ) = %.3f s: slack %.3f s", left, rel, right, right-left)
	if left >= right {
		t.Errorf("the fencing inequality fails: A + (T − m)(1 + ρ) + P = %.3f s is not below D + Q(1 − ρ) = %.3f s; "+
			"raise down-after-milliseconds or newEpochQuarantineMs, or lower min-replicas-max-lag or leaseTtlMs (docs/ARCHITECTURE.md, \"Fencing across failovers\")", left, right)
	}
}
