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

// Linearizability of one session's lease (lin_helpers_test.go has the model
// and the driver, lin_failover_test.go the replicated Redis). Histories come
// from concurrent clients driving the real scripts while leases expire
// (200 ms TTL, holders that sleep past it), Redis is flushed, a private
// redis-server is restarted without persistence, and a primary fails over
// to a replica that lacks its last acknowledged writes; porcupine checks
// each history against the sequential specification. The same driver with a
// broken claim or renew script, or a claim script that ignores the node its
// epoch began on, must produce histories porcupine refuses.

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
		{"a lost lease is abandoned", with(
			op(1, linRenew, "b", "E:2", 300, 301, linRefused, ""),
			op(1, linAbandon, "b", "E:2", 302, 303, linOK, ""),
			op(2, linEnqueue, "c", "", 304, 305, linNew, ""),
			op(2, linAcquire, "c", "", 306, 307, linClaimed, "E:3"),
		), true},
		{"an abandon after the fleet settled the attempt", with(
			op(2, linEnqueue, "c", "", 16, 17, linNew, ""),
			op(2, linAcquire, "c", "", 300, 301, linClaimed, "E:3"),
			op(1, linAbandon, "b", "E:2", 302, 303, linFinished, ""),
		), true},
		{"an abandon of a live claim is fenced", with(
			op(1, linAbandon, "b", "E:3", 16, 17, linFenced, ""),
		), true},
		{"an abandon under another fence accepted", with(
			op(1, linAbandon, "b", "E:3", 16, 17, linOK, ""),
		), false},
		{"another client's queued attempt withdrawn", with(
			op(2, linEnqueue, "c", "", 16, 17, linNew, ""),
			op(3, linEnqueue, "d", "", 18, 19, linNew, ""),
			op(3, linWithdraw, "c", "", 20, 21, linRemoved, ""),
			op(2, linAcquire, "c", "", 22, 23, linMissing, ""),
		), true},
	}
	// Failovers: after the base history (c1 holds b under E:2 until about
	// 215 ms), the replica is detached and promoted.
	detach := func(call, ret float64) porcupine.Operation {
		return op(linFaultClient, linDetach, "", "", call, ret, linOK, "")
	}
	promote := func(call, ret float64) porcupine.Operation {
		return op(linFaultClient, linPromote, "", "", call, ret, linOK, "")
	}
	// On the old primary after the detach: b finished, c claimed under E:3.
	lostOnPrimary := with(
		detach(16, 17),
		op(1, linFinish, "b", "E:2", 18, 19, linOK, ""),
		op(2, linEnqueue, "c", "", 20, 21, linNew, ""),
		op(2, linAcquire, "c", "", 22, 23, linClaimed, "E:3"),
		promote(24, 25),
		op(3, linEnqueue, "d", "", 26, 27, linNew, ""),
	)
	after := func(h []porcupine.Operation, ops ...porcupine.Operation) []porcupine.Operation {
		return append(slices.Clone(h), ops...)
	}
	// c was queued before the detach and claimed on the old primary only:
	// on the promoted replica it is still accepted, behind b.
	claimLost := with(
		op(2, linEnqueue, "c", "", 16, 17, linNew, ""),
		detach(18, 19),
		op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
		op(2, linAcquire, "c", "", 22, 23, linClaimed, "E:3"),
		promote(24, 25),
		op(2, linRenew, "c", "E:3", 26, 27, linRefused, ""),
		op(3, linEnqueue, "d", "", 30, 31, linNew, ""),
	)
	// A claim with a lost reply (a new epoch after a flush) before the
	// detach: the replica's copy holds its lease, in an epoch no client
	// has seen.
	unseenCopied := with(
		op(linFaultClient, linFlush, "", "", 16, 17, linOK, ""),
		op(2, linEnqueue, "c", "", 18, 19, linNew, ""),
		op(2, linAcquire, "c", "", 20, 21, linUnknown, ""),
		detach(22, 23),
	)
	cases = append(cases, []struct {
		name    string
		history []porcupine.Operation
		legal   bool
	}{
		{"failover: a new epoch from 1 on the promoted replica", after(lostOnPrimary,
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "F:1"),
		), true},
		{"failover: the promoted replica continues the old epoch (a fence handed out twice)", after(lostOnPrimary,
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "E:3"),
		), false},
		{"failover: the promoted replica continues the old epoch (the primary lost no claim)", with(
			detach(16, 17),
			promote(18, 19),
			op(3, linEnqueue, "d", "", 20, 21, linNew, ""),
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "E:3"),
		), false},
		{"failover: a new epoch that does not start at 1", after(lostOnPrimary,
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "F:2"),
		), false},
		{"failover: the replica's copy is busy while its lease lasts", after(lostOnPrimary,
			op(3, linAcquire, "d", "", 28, 29, linBusy, ""),
			read(3, 30, 31, 1, "b", "E:2"),
			op(1, linRenew, "b", "E:2", 32, 33, linOK, ""),
		), true},
		{"failover: the old primary's claim survives", after(lostOnPrimary,
			read(3, 28, 29, 2, "c", "E:3"),
		), false},
		{"failover: the old primary's claim is gone", after(lostOnPrimary,
			op(2, linRenew, "c", "E:3", 28, 29, linRefused, ""),
			op(2, linFinish, "c", "E:3", 30, 31, linMissing, ""),
		), true},
		{"failover: the old primary's renewal is lost with it", with(
			detach(16, 17),
			op(1, linRenew, "b", "E:2", 150, 151, linOK, ""),
			promote(160, 161),
			op(1, linRenew, "b", "E:2", 300, 301, linOK, ""),
		), false},
		{"failover: the lease expires as the copy says", with(
			detach(16, 17),
			op(1, linRenew, "b", "E:2", 150, 151, linOK, ""),
			promote(160, 161),
			op(1, linRenew, "b", "E:2", 300, 301, linRefused, ""),
		), true},
		{"failover: a write during the detach is in the copy", with(
			detach(16, 30),
			op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
			promote(40, 41),
			read(3, 42, 43, -1, "", ""),
		), true},
		{"failover: a write during the detach is not in the copy", with(
			detach(16, 30),
			op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
			promote(40, 41),
			read(3, 42, 43, 1, "b", "E:2"),
		), true},
		{"failover: a write after the detach is not in the copy", with(
			detach(16, 17),
			op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
			promote(40, 41),
			read(3, 42, 43, -1, "", ""),
		), false},
		{"failover: the snapshot outlives a flush of the old primary", with(
			detach(16, 17),
			op(linFaultClient, linFlush, "", "", 18, 19, linOK, ""),
			op(2, linEnqueue, "c", "", 20, 21, linNew, ""),
			op(2, linAcquire, "c", "", 22, 23, linClaimed, "F:1"),
			promote(24, 25),
			read(3, 26, 27, 1, "b", "E:2"),
			op(3, linEnqueue, "d", "", 28, 29, linNew, ""),
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "G:1"),
		), true},
		{"failover: an epoch the old primary began after the detach comes back", with(
			detach(16, 17),
			op(linFaultClient, linFlush, "", "", 18, 19, linOK, ""),
			op(2, linEnqueue, "c", "", 20, 21, linNew, ""),
			op(2, linAcquire, "c", "", 22, 23, linClaimed, "F:1"),
			promote(24, 25),
			op(3, linEnqueue, "d", "", 28, 29, linNew, ""),
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "F:1"),
		), false},
		{"failover: a claim overlapping the promote ran on the old primary", with(
			op(2, linEnqueue, "c", "", 16, 17, linNew, ""),
			detach(18, 19),
			op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
			op(2, linAcquire, "c", "", 240, 260, linClaimed, "E:3"),
			promote(250, 251),
		), true},
		{"failover: a claim overlapping the promote ran on the promoted replica", with(
			op(2, linEnqueue, "c", "", 16, 17, linNew, ""),
			detach(18, 19),
			op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
			op(2, linAcquire, "c", "", 240, 260, linClaimed, "F:1"),
			promote(250, 251),
		), true},
		{"failover: a claim overlapping the promote, neither side's fence", with(
			op(2, linEnqueue, "c", "", 16, 17, linNew, ""),
			detach(18, 19),
			op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
			op(2, linAcquire, "c", "", 240, 260, linClaimed, "F:2"),
			promote(250, 251),
		), false},
		{"failover: a lost reply overlapping the promote, its claim on the promoted replica", with(
			op(2, linEnqueue, "c", "", 16, 17, linNew, ""),
			detach(18, 19),
			op(1, linFinish, "b", "E:2", 20, 21, linOK, ""),
			op(2, linAcquire, "c", "", 240, 260, linUnknown, ""),
			promote(250, 251),
			read(3, 262, 263, 2, "c", "G:1"),
		), true},
		{"failover: a lost claim is answered by its worker's abandon", after(claimLost,
			op(2, linAbandon, "c", "E:3", 28, 29, linOK, ""),
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "F:1"),
		), true},
		{"failover: a lost claim's abandon refused", after(claimLost,
			op(2, linAbandon, "c", "E:3", 28, 29, linFenced, ""),
		), false},
		{"failover: a lost claim holds the session", after(claimLost,
			op(3, linAcquire, "d", "", 300, 301, linBusy, ""),
		), true},
		{"failover: a lost claim does not hold the session", after(claimLost,
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "F:1"),
		), false},
		{"failover: a lost claim withdrawn as an orphan", after(claimLost,
			op(3, linWithdraw, "c", "", 300, 301, linRemoved, ""),
			op(3, linAcquire, "d", "", 302, 303, linClaimed, "F:1"),
		), true},
		{"failover: an epoch unseen at the detach, seen on the promoted replica", after(unseenCopied,
			promote(24, 25),
			read(3, 26, 27, 2, "c", "G:1"),
			op(3, linEnqueue, "d", "", 28, 29, linNew, ""),
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "H:1"),
		), true},
		{"failover: an epoch unseen at the detach continues on the promoted replica", after(unseenCopied,
			promote(24, 25),
			read(3, 26, 27, 2, "c", "G:1"),
			op(3, linEnqueue, "d", "", 28, 29, linNew, ""),
			op(3, linAcquire, "d", "", 300, 301, linClaimed, "G:2"),
		), false},
		{"failover: an epoch unseen at the detach, seen on both sides", after(unseenCopied,
			read(3, 24, 25, 2, "c", "G:1"),
			promote(26, 27),
			read(3, 28, 29, 2, "c", "G:1"),
		), true},
		{"failover: an epoch unseen at the detach, seen as two", after(unseenCopied,
			read(3, 24, 25, 2, "c", "G:1"),
			promote(26, 27),
			read(3, 28, 29, 2, "c", "H:1"),
		), false},
		{"failover: the old primary's unseen epoch is not the copy's", after(unseenCopied,
			op(linFaultClient, linFlush, "", "", 24, 25, linOK, ""),
			op(3, linEnqueue, "d", "", 26, 27, linNew, ""),
			op(3, linAcquire, "d", "", 28, 29, linUnknown, ""),
			read(3, 30, 31, 3, "d", "H:1"),
			promote(32, 33),
			read(3, 34, 35, 2, "c", "G:1"),
		), true},
	}...)
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
	missing := func() (m []string, failover bool) {
		for _, c := range []struct {
			what     string
			n        int
			failover bool // a failover round makes it
		}{
			{"successful acquires", total.claimed, false},
			{"busy acquires", total.busy, false},
			{"successful renewals", total.renewOK, false},
			{"renewals refused after the holder slept past the TTL", total.staleRenewRefused, false},
			{"successful finishes", total.finishOK, false},
			{"finishes refused after the holder slept past the TTL", total.staleFinishFenced + total.staleFinishFinished, false},
			{"reads that saw a holder", total.readsHeld, false},
			{"successful abandons", total.abandonOK, false},
			{"operations whose outcome is unknown", total.unknown, false},
			{"data losses", total.dataLosses, false},
			{"epoch changes", total.epochChanges, false},
			{"failovers", total.failovers, true},
			{"acknowledged writes lost in a failover", total.lostWrites, true},
			{"claims on a promoted replica", total.claimsAfterFailover, true},
		} {
			if c.n == 0 {
				m = append(m, c.what)
				failover = failover || c.failover
			}
		}
		return m, failover
	}
	for extra := 0; extra < 4; extra++ {
		m, failover := missing()
		if len(m) == 0 {
			break
		}
		t.Logf("no %v yet: one more round", m)
		plan := []linFault{faultRestart}
		if failover {
			plan = []linFault{faultDetach, faultPromote}
		}
		run(len(plans)+extra, plan)
	}
	if m, _ := missing(); len(m) > 0 {
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
