package leases

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// Linearizability of one session's lease (lin_model_test.go and
// lin_spec_test.go have the model, linearizability_model_test.go its test,
// lin_history_test.go, lin_claim_test.go and lin_driver_test.go the driver,
// lin_failover_test.go the replicated Redis). Histories come
// from concurrent clients driving the real scripts while leases expire
// (200 ms TTL, holders that sleep past it), Redis is flushed, a private
// redis-server is restarted without persistence, and a primary fails over
// to a replica that lacks its last acknowledged writes; porcupine checks
// each history against the sequential specification. The same driver with a
// broken claim or renew script, or a claim script that ignores the node its
// epoch began on, must produce histories porcupine refuses.

const linOpsPerClient = 50

// Concurrent clients on one session, with leases expiring, FLUSHALL,
// redis-server restarts and failovers (a primary killed, its replica
// promoted without the primary's last acknowledged writes) during the
// histories: every history is linearizable, and the histories did exercise
// what the check is about.
func TestLinearizabilityUnderFaults(t *testing.T) {
	r := newPrivateRedis(t)
	single := singleLinNode(r)
	d := realLinDriver(linStoreOn(t, r.Addr()))
	plans := [][]linFault{
		nil,
		{faultFlush},
		{faultRestart},
		{faultFlush, faultRestart},
		{faultRestart, faultFlush},
		{faultFlush, faultFlush},
		{faultDetach, faultPromote},
		{faultFlush, faultDetach, faultPromote},
		{faultDetach, faultFlush, faultPromote},
		{faultDetach, faultPromote, faultRestart},
	}
	var total linStats
	run := func(i int, faults []linFault) {
		seed := uint64(time.Now().UnixNano())
		h, ran := linRound(t, d, single, fmt.Sprintf("lin:round-%d", i), seed, linOpsPerClient, faults)
		st := h.stats()
		total.add(st)
		checkStarted := time.Now()
		checkLinearizable(t, h, fmt.Sprintf("round %d (faults %v, seed %d)", i, faults, seed), porcupine.Ok)
		t.Logf("round %d faults %v seed %d: %d ops in %s, checked in %s: %+v", i, faults, seed, st.ops,
			ran.Round(time.Millisecond), time.Since(checkStarted).Round(time.Millisecond), st)
	}
	for i, faults := range plans {
		run(i, faults)
	}
	// Not vacuous: the histories hold each thing the check is about. The
	// clients choose at random, so a rare kind may need another round.
	missing := func() (m []string, plan []linFault, alone bool) {
		for _, c := range []struct {
			what     string
			n        int
			failover bool // a failover round makes it
			alone    bool // a lone client's round makes it
		}{
			{"successful acquires", total.claimed, false, false},
			{"busy acquires", total.busy, false, false},
			{"successful renewals", total.renewOK, false, false},
			{"renewals refused after the holder slept past the TTL", total.staleRenewRefused, false, false},
			{"successful finishes", total.finishOK, false, false},
			{"finishes refused after the holder slept past the TTL", total.staleFinishFenced + total.staleFinishFinished, false, false},
			{"reads that saw a holder", total.readsHeld, false, false},
			{"successful abandons", total.abandonOK, false, true},
			{"operations whose outcome is unknown", total.unknown, false, false},
			{"data losses", total.dataLosses, false, false},
			{"epoch changes", total.epochChanges, false, false},
			{"failovers", total.failovers, true, false},
			{"acknowledged writes lost in a failover", total.lostWrites, true, false},
			{"claims on a promoted replica", total.claimsAfterFailover, true, false},
		} {
			if c.n == 0 {
				m = append(m, c.what)
				if c.failover {
					plan = []linFault{faultDetach, faultPromote}
				}
				alone = alone || c.alone
			}
		}
		if plan == nil {
			plan = []linFault{faultRestart}
		}
		return m, plan, alone
	}
	for extra := 0; extra < 4; extra++ {
		m, plan, alone := missing()
		if len(m) == 0 {
			break
		}
		t.Logf("no %v yet: one more round", m)
		if alone {
			// With four clients a lost lease's attempt is nearly always
			// given its outcome by another client's claim before its
			// holder abandons it.
			d.clients = 1
		}
		run(len(plans)+extra, plan)
		d.clients = 0
	}
	if m, _, _ := missing(); len(m) > 0 {
		t.Errorf("the histories hold no %v: the check proved nothing about them", m)
	}
	t.Logf("all rounds: %+v", total)
}

// linRound runs one round of d on single, or, when faults hold a failover,
// on a primary and a replica of the round's own; it returns the history and
// how long the round ran.
func linRound(t *testing.T, d *linDriver, single *linNodes, session string, seed uint64, ops int, faults []linFault) (*linHistory, time.Duration) {
	t.Helper()
	nodes := single
	if slices.Contains(faults, faultDetach) {
		nodes = newLinReplicated(t)
		defer nodes.kill()
		d = d.on(nodes.store(t))
		d.withdrawOrphans = true
	}
	started := time.Now()
	h := d.round(t, nodes, session, seed, ops, faults)
	return h, time.Since(started)
}

// linFailover is the failover plan of the broken-script tests.
var linFailover = []linFault{faultDetach, faultPromote}

// A claim script that grants the lease without checking that it is held
// produces histories that are not linearizable, with and without a
// failover.
func TestLinearizabilityDetectsBrokenClaim(t *testing.T) {
	d := realLinDriver(newStore(t))
	d.claim = scriptClaim(brokenClaimScript)
	for _, faults := range [][]linFault{nil, linFailover} {
		seed := uint64(time.Now().UnixNano())
		h, _ := linRound(t, d, singleLinNode(env.Redis), fmt.Sprintf("lin:broken-claim-%d", len(faults)), seed, 30, faults)
		st := h.stats()
		if st.claimed < 2 {
			t.Fatalf("faults %v: the broken claim granted %d leases; the history shows nothing", faults, st.claimed)
		}
		checkLinearizable(t, h, fmt.Sprintf("broken claim (faults %v, seed %d)", faults, seed), porcupine.Illegal)
		t.Logf("faults %v seed %d: %+v", faults, seed, st)
	}
}

// A renew script that extends the lease without checking the fence produces
// histories that are not linearizable, with and without a failover: a holder
// that slept past its TTL is told it still holds the session.
func TestLinearizabilityDetectsBrokenRenew(t *testing.T) {
	d := realLinDriver(newStore(t))
	d.renew = brokenRenewScript
	d.renewAfterSleep = true
	for _, faults := range [][]linFault{nil, linFailover} {
		checked := false
		for round := 0; round < 10 && !checked; round++ {
			seed := uint64(time.Now().UnixNano())
			h, _ := linRound(t, d, singleLinNode(env.Redis), fmt.Sprintf("lin:broken-renew-%d-%d", len(faults), round), seed, 30, faults)
			st := h.stats()
			if st.staleRenews == 0 {
				continue // no holder renewed after sleeping past its TTL: try again
			}
			checkLinearizable(t, h, fmt.Sprintf("broken renew (faults %v, seed %d)", faults, seed), porcupine.Illegal)
			t.Logf("faults %v seed %d: %+v", faults, seed, st)
			checked = true
		}
		if !checked {
			t.Fatalf("faults %v: no round had a renewal after the TTL", faults)
		}
	}
}

// The check catches a claim that ignores the node: claimScript with its
// node comparison taken out, so that it continues the fence hash's epoch on
// whatever node it finds it, as the scripts did before epochs were bound to
// their node. Without a failover it is correct (a data loss drops the fence
// hash, so a new epoch starts anyway), and porcupine says so; after a
// failover it continues, on the promoted replica, the epoch of the copy,
// whose next fences the old primary may have handed out after the detach,
// and porcupine refuses the history.
func TestLinearizabilityDetectsClaimIgnoringNode(t *testing.T) {
	const bound = "if (not epoch) or f[2] ~= node then"
	src := scriptSource(t, claimScript)
	if strings.Count(src, bound) != 1 {
		t.Fatalf("claimScript no longer has %q once: update this variant", bound)
	}
	d := realLinDriver(newStore(t))
	d.claim = scriptClaim(redis.NewScript(strings.Replace(src, bound, "if not epoch then", 1)))

	seed := uint64(time.Now().UnixNano())
	h, _ := linRound(t, d, singleLinNode(env.Redis), "lin:ignoring-node-flush", seed, 30, []linFault{faultFlush})
	checkLinearizable(t, h, fmt.Sprintf("claim ignoring the node, without a failover (seed %d)", seed), porcupine.Ok)
	t.Logf("faults %v seed %d: %+v", []linFault{faultFlush}, seed, h.stats())

	for round := 0; round < 10; round++ {
		seed := uint64(time.Now().UnixNano())
		h, _ := linRound(t, d, nil, fmt.Sprintf("lin:ignoring-node-%d", round), seed, linOpsPerClient, linFailover)
		st := h.stats()
		if st.claimsAfterFailover == 0 || !claimedBeforeDetach(h) {
			continue // the copy had no epoch to continue, or nobody claimed on the promoted replica: try again
		}
		checkLinearizable(t, h, fmt.Sprintf("claim ignoring the node, with a failover (seed %d)", seed), porcupine.Illegal)
		t.Logf("faults %v seed %d: %+v", linFailover, seed, st)
		return
	}
	t.Fatal("no round had a claim before the detach and one on the promoted replica")
}

// claimedBeforeDetach reports whether a claim was granted before h's detach:
// then the replica's copy has a fence hash.
func claimedBeforeDetach(h *linHistory) bool {
	i := slices.IndexFunc(h.ops, func(op porcupine.Operation) bool { return op.Input.(linInput).Kind == linDetach })
	return i >= 0 && slices.ContainsFunc(h.ops, func(op porcupine.Operation) bool {
		return op.Input.(linInput).Kind == linAcquire && op.Output.(linOutput).Status == linClaimed && op.Return < h.ops[i].Call
	})
}

// scriptSource is the Lua source of sc, as EVAL sends it: caught by a hook
// of a client that never sends anything.
func scriptSource(t *testing.T, sc *redis.Script) string {
	t.Helper()
	var src string
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	c.AddHook(sourceHook{src: &src})
	_ = sc.Eval(context.Background(), c, []string{"k"}).Err()
	if src == "" || redis.NewScript(src).Hash() != sc.Hash() {
		t.Fatalf("no source caught for script %s", sc.Hash())
	}
	return src
}

// sourceHook records the script of an EVAL and sends nothing.
type sourceHook struct{ src *string }

func (sourceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h sourceHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); strings.EqualFold(cmd.Name(), "eval") && len(args) > 1 {
			*h.src, _ = args[1].(string)
		}
		return nil
	}
}

func (sourceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// checkLinearizable runs porcupine on h and fails unless it answers want; an
// unexpected verdict on a real history leaves a visualization behind.
func checkLinearizable(t *testing.T, h *linHistory, what string, want porcupine.CheckResult) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(linModel, h.ops, time.Minute)
	if res == want {
		return
	}
	msg := fmt.Sprintf("%s: porcupine says %s, want %s", what, res, want)
	if res == porcupine.Unknown {
		msg += " (the check timed out)"
	}
	if f, err := os.CreateTemp("", "teamster-lin-*.html"); err == nil {
		if porcupine.Visualize(linModel, info, f) == nil {
			msg += "; visualization: " + f.Name()
		}
		f.Close()
	}
	t.Error(msg)
}

// brokenClaimScript is claimScript without its two checks: it walks no
// order and grants the lease whether or not it is held.
var brokenClaimScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[2], 'state')
if not st[1] then return {'missing'} end
if st[1] ~= 'accepted' then return {'done', st[1]} end
local epoch = redis.call('HGET', KEYS[4], 'epoch')
if not epoch then
  epoch = ARGV[4]
  redis.call('HSET', KEYS[4], 'epoch', epoch, 'n', 0)
end
local fence = epoch .. ':' .. redis.call('HINCRBY', KEYS[4], 'n', 1)
redis.call('HSET', KEYS[3], 'holder', ARGV[2], 'attempt', ARGV[1], 'fence', fence)
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('HSET', KEYS[2], 'state', 'claimed', 'worker', ARGV[2], 'fence', fence, 'seqmax', ARGV[5])
return {'claimed', fence, '0', '0'}
`)

// brokenRenewScript extends whatever lease the session has, without
// checking the fence.
var brokenRenewScript = redis.NewScript(`
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)
