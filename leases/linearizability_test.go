package leases

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// Linearizability of one session's lease (lin_helpers_test.go has the model
// and the driver). Histories come from concurrent clients driving the real
// scripts while leases expire (200 ms TTL, holders that sleep past it), Redis
// is flushed, and a private redis-server is restarted without persistence;
// porcupine checks each history against the sequential specification. The
// same driver with a broken claim or renew script must produce histories
// porcupine refuses.

const linOpsPerClient = 50

// The model accepts the legal sequential histories it should and refuses the
// illegal ones, so that a check that passes says something.
func TestLinearizabilityModel(t *testing.T) {
	ms := func(v float64) int64 { return int64(v * float64(time.Millisecond)) }
	op := func(client int, kind linKind, attempt, fence string, call, ret float64, status, outFence string) porcupine.Operation {
		in := linInput{Kind: kind, Client: client, Attempt: attempt, Fence: fence, Call: ms(call), Return: ms(ret)}
		out := linOutput{Status: status, Fence: outFence, Holder: -1}
		return porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: in.Return}
	}
	read := func(client int, call, ret float64, holder int, attempt, fence string) porcupine.Operation {
		o := op(client, linRead, "", "", call, ret, linHeld, fence)
		out := o.Output.(linOutput)
		out.Holder, out.Attempt = holder, attempt
		if holder < 0 {
			out.Status = linNone
		}
		o.Output = out
		return o
	}
	// c0 claims a, renews, finishes; c1 queued b behind it and claims after.
	base := []porcupine.Operation{
		op(0, linEnqueue, "a", "", 0, 1, linNew, ""),
		op(0, linAcquire, "a", "", 2, 3, linClaimed, "E:1"),
		op(1, linEnqueue, "b", "", 4, 5, linNew, ""),
		op(1, linAcquire, "b", "", 6, 7, linBusy, ""),
		read(1, 8, 9, 0, "a", "E:1"),
		op(0, linRenew, "a", "E:1", 10, 11, linOK, ""),
		op(0, linFinish, "a", "E:1", 12, 13, linOK, ""),
		op(1, linAcquire, "b", "", 14, 15, linClaimed, "E:2"),
	}
	with := func(ops ...porcupine.Operation) []porcupine.Operation {
		return append(append([]porcupine.Operation{}, base...), ops...)
	}
	cases := []struct {
		name    string
		history []porcupine.Operation
		legal   bool
	}{
		{"two turns in order", base, true},
		{"a second holder while the lease is held", []porcupine.Operation{
			op(0, linEnqueue, "a", "", 0, 1, linNew, ""),
			op(0, linAcquire, "a", "", 2, 3, linClaimed, "E:1"),
			op(1, linEnqueue, "b", "", 4, 5, linNew, ""),
			op(1, linAcquire, "b", "", 6, 7, linClaimed, "E:2"),
		}, false},
		{"a fence that skips a number", []porcupine.Operation{
			op(0, linEnqueue, "a", "", 0, 1, linNew, ""),
			op(0, linAcquire, "a", "", 2, 3, linClaimed, "E:2"),
		}, false},
		{"busy with the session free", []porcupine.Operation{
			op(0, linEnqueue, "a", "", 0, 1, linNew, ""),
			op(0, linAcquire, "a", "", 2, 3, linBusy, ""),
		}, false},
		{"renew refused while surely held", with(
			op(1, linRenew, "b", "E:2", 16, 17, linRefused, ""),
		), false},
		{"renew refused after the TTL", with(
			op(1, linRenew, "b", "E:2", 15+250, 15+251, linRefused, ""),
		), true},
		{"renew accepted after the TTL", with(
			op(1, linRenew, "b", "E:2", 15+250, 15+251, linOK, ""),
		), false},
		{"renew near the expiry may go either way", with(
			op(1, linRenew, "b", "E:2", 15+190, 15+210, linRefused, ""),
		), true},
		{"the old holder's fence after the next claim", with(
			op(0, linRenew, "a", "E:1", 16, 17, linRefused, ""),
			op(0, linRelease, "a", "E:1", 18, 19, linRefused, ""),
		), true},
		{"the old holder's release accepted", with(
			op(0, linRelease, "a", "E:1", 16, 17, linOK, ""),
		), false},
		{"expired holder: the next claim settles it, its finish says finished", []porcupine.Operation{
			op(0, linEnqueue, "a", "", 0, 1, linNew, ""),
			op(0, linAcquire, "a", "", 2, 3, linClaimed, "E:1"),
			op(1, linEnqueue, "b", "", 4, 5, linNew, ""),
			op(1, linAcquire, "b", "", 300, 301, linClaimed, "E:2"),
			op(0, linFinish, "a", "E:1", 302, 303, linFinished, ""),
		}, true},
		{"expired holder, nobody settled it: finish is fenced", []porcupine.Operation{
			op(0, linEnqueue, "a", "", 0, 1, linNew, ""),
			op(0, linAcquire, "a", "", 2, 3, linClaimed, "E:1"),
			op(0, linFinish, "a", "E:1", 300, 301, linFenced, ""),
		}, true},
		{"expired holder's finish accepted", []porcupine.Operation{
			op(0, linEnqueue, "a", "", 0, 1, linNew, ""),
			op(0, linAcquire, "a", "", 2, 3, linClaimed, "E:1"),
			op(0, linFinish, "a", "E:1", 300, 301, linOK, ""),
		}, false},
		{"data loss: a new epoch from 1", with(
			op(linFaultClient, linFlush, "", "", 16, 17, linOK, ""),
			op(1, linFinish, "b", "E:2", 18, 19, linMissing, ""),
			op(2, linEnqueue, "c", "", 20, 21, linNew, ""),
			op(2, linAcquire, "c", "", 22, 23, linClaimed, "F:1"),
		), true},
		{"data loss: the old epoch continues", with(
			op(linFaultClient, linFlush, "", "", 16, 17, linOK, ""),
			op(2, linEnqueue, "c", "", 20, 21, linNew, ""),
			op(2, linAcquire, "c", "", 22, 23, linClaimed, "E:3"),
		), false},
		{"data loss: an old epoch comes back", with(
			op(linFaultClient, linFlush, "", "", 16, 17, linOK, ""),
			op(2, linEnqueue, "c", "", 20, 21, linNew, ""),
			op(2, linAcquire, "c", "", 22, 23, linClaimed, "E:1"),
		), false},
		{"data loss: the old holder's renew accepted", with(
			op(linFaultClient, linFlush, "", "", 16, 17, linOK, ""),
			op(1, linRenew, "b", "E:2", 18, 19, linOK, ""),
		), false},
		{"a lost reply: the claim may have happened", with(
			op(linFaultClient, linRestart, "", "", 16, 40, linOK, ""),
			op(2, linEnqueue, "c", "", 41, 42, linNew, ""),
			op(2, linAcquire, "c", "", 43, 44, linUnknown, ""),
			op(3, linEnqueue, "d", "", 45, 46, linNew, ""),
			op(3, linAcquire, "d", "", 47, 48, linBusy, ""),
			read(3, 49, 50, 2, "c", "G:1"),
		), true},
		{"a lost reply: the claim may not have happened", with(
			op(linFaultClient, linRestart, "", "", 16, 40, linOK, ""),
			op(2, linEnqueue, "c", "", 41, 42, linNew, ""),
			op(2, linAcquire, "c", "", 43, 44, linUnknown, ""),
			op(2, linWithdraw, "c", "", 45, 46, linRemoved, ""),
			op(3, linEnqueue, "d", "", 47, 48, linNew, ""),
			op(3, linAcquire, "d", "", 49, 50, linClaimed, "G:1"),
		), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := porcupine.CheckOperationsTimeout(linModel, c.history, 10*time.Second)
			want := porcupine.Illegal
			if c.legal {
				want = porcupine.Ok
			}
			if got != want {
				t.Fatalf("porcupine says %s, want %s", got, want)
			}
		})
	}
}

// Concurrent clients on one session, with leases expiring, FLUSHALL and
// redis-server restarts during the histories: every history is linearizable,
// and the histories did exercise what the check is about.
func TestLinearizabilityUnderFaults(t *testing.T) {
	r := newPrivateRedis(t)
	s := linStoreOn(t, r.Addr())
	d := realLinDriver(s)
	plans := [][]linFault{
		nil,
		{faultFlush},
		{faultRestart},
		{faultFlush, faultRestart},
		{faultRestart, faultFlush},
		{faultFlush, faultFlush},
	}
	var total linStats
	run := func(i int, faults []linFault) {
		seed := uint64(time.Now().UnixNano())
		started := time.Now()
		h := d.round(t, r, fmt.Sprintf("lin:round-%d", i), seed, linOpsPerClient, faults)
		ran := time.Since(started)
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
	missing := func() []string {
		var m []string
		for _, c := range []struct {
			what string
			n    int
		}{
			{"successful acquires", total.claimed},
			{"busy acquires", total.busy},
			{"successful renewals", total.renewOK},
			{"renewals refused after the holder slept past the TTL", total.staleRenewRefused},
			{"successful finishes", total.finishOK},
			{"finishes refused after the holder slept past the TTL", total.staleFinishFenced + total.staleFinishFinished},
			{"reads that saw a holder", total.readsHeld},
			{"operations whose outcome is unknown", total.unknown},
			{"data losses", total.dataLosses},
			{"epoch changes", total.epochChanges},
		} {
			if c.n == 0 {
				m = append(m, c.what)
			}
		}
		return m
	}
	for extra := 0; len(missing()) > 0 && extra < 4; extra++ {
		t.Logf("no %v yet: one more round", missing())
		run(len(plans)+extra, []linFault{faultRestart})
	}
	if m := missing(); len(m) > 0 {
		t.Errorf("the histories hold no %v: the check proved nothing about them", m)
	}
	t.Logf("all rounds: %+v", total)
}

// A claim script that grants the lease without checking that it is held
// produces histories that are not linearizable.
func TestLinearizabilityDetectsBrokenClaim(t *testing.T) {
	s := newStore(t)
	d := realLinDriver(s)
	d.claim = claimWithScript(brokenClaimScript)
	seed := uint64(time.Now().UnixNano())
	h := d.round(t, env.Redis, "lin:broken-claim", seed, 30, nil)
	if st := h.stats(); st.claimed < 2 {
		t.Fatalf("the broken claim granted %d leases; the history shows nothing", st.claimed)
	}
	checkLinearizable(t, h, fmt.Sprintf("broken claim (seed %d)", seed), porcupine.Illegal)
}

// A renew script that extends the lease without checking the fence produces
// histories that are not linearizable: a holder that slept past its TTL is
// told it still holds the session.
func TestLinearizabilityDetectsBrokenRenew(t *testing.T) {
	s := newStore(t)
	d := realLinDriver(s)
	d.renew = brokenRenewScript
	d.renewAfterSleep = true
	for round := 0; round < 10; round++ {
		seed := uint64(time.Now().UnixNano())
		h := d.round(t, env.Redis, fmt.Sprintf("lin:broken-renew-%d", round), seed, 30, nil)
		if h.stats().staleRenews == 0 {
			continue // no holder renewed after sleeping past its TTL: try again
		}
		checkLinearizable(t, h, fmt.Sprintf("broken renew (seed %d)", seed), porcupine.Illegal)
		return
	}
	t.Fatal("no round had a renewal after the TTL")
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
