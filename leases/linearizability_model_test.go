package leases

import (
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

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
