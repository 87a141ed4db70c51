package leases

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// linHistory records operations with their call and return times.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	count atomic.Int64
}

func newLinHistory() *linHistory { return &linHistory{start: time.Now()} }

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(client int, in linInput, out linOutput) {
	in.Client = client
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: in.Return})
	h.mu.Unlock()
	h.count.Add(1)
}

// linStats counts what a history exercised, so that a passing check cannot
// be vacuous.
type linStats struct {
	ops, unknown, claimed, busy, renewOK, staleRenews, staleRenewRefused, finishOK, staleFinishFenced, staleFinishFinished, releaseOK,
	readsHeld, withdrawn, blockersWithdrawn, abandonOK, dataLosses, epochs, epochChanges int
	// failovers counts promotes; lostWrites the acknowledged writes made on
	// the old primary between a detach and its promote (all lost);
	// claimsAfterFailover the claims granted on a promoted replica.
	failovers, lostWrites, claimsAfterFailover int
	// fencesTwice counts fences granted to more than one claim (never, by a
	// correct implementation; the model refuses them).
	fencesTwice int
}

func (h *linHistory) stats() linStats {
	var st linStats
	epochs := map[string]bool{}
	fences := map[string]int{}
	// The windows of lost writes (from a detach's return to its promote's
	// call) and the promotes' returns.
	type window struct{ from, to int64 }
	var lost []window
	var promoted []int64
	var detachedAt int64 = -1
	for _, op := range h.ops {
		switch op.Input.(linInput).Kind {
		case linDetach:
			detachedAt = op.Return
		case linPromote:
			lost = append(lost, window{detachedAt, op.Call})
			promoted = append(promoted, op.Return)
		}
	}
	for _, op := range h.ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		st.ops++
		if in.Kind == linRenew && in.Stale {
			st.staleRenews++
		}
		write := false
		switch {
		case out.Status == linUnknown:
			st.unknown++
		case in.Kind == linAcquire && out.Status == linClaimed:
			st.claimed++
			write = true
			e, _, _ := parseLinFence(out.Fence)
			epochs[e] = true
			if fences[out.Fence]++; fences[out.Fence] == 2 {
				st.fencesTwice++
			}
			if slices.ContainsFunc(promoted, func(at int64) bool { return op.Call > at }) {
				st.claimsAfterFailover++
			}
		case in.Kind == linAcquire && out.Status == linBusy:
			st.busy++
		case in.Kind == linRenew && out.Status == linOK:
			st.renewOK++
			write = true
		case in.Kind == linRenew && out.Status == linRefused && in.Stale:
			st.staleRenewRefused++
		case in.Kind == linFinish && out.Status == linOK:
			st.finishOK++
			write = true
		case in.Kind == linFinish && in.Stale && out.Status == linFenced:
			st.staleFinishFenced++
		case in.Kind == linFinish && in.Stale && out.Status == linFinished:
			st.staleFinishFinished++
		case in.Kind == linRelease && out.Status == linOK:
			st.releaseOK++
			write = true
		case in.Kind == linRead && out.Status == linHeld:
			st.readsHeld++
		case in.Kind == linWithdraw && out.Status == linRemoved:
			st.withdrawn++
			if in.Blocker {
				st.blockersWithdrawn++
			}
			write = true
		case in.Kind == linAbandon && out.Status == linOK:
			st.abandonOK++
			write = true
		case in.Kind == linEnqueue && out.Status == linNew:
			write = true
		case in.Kind == linFlush || in.Kind == linRestart:
			st.dataLosses++
		case in.Kind == linPromote:
			st.failovers++
		}
		if write && slices.ContainsFunc(lost, func(w window) bool { return op.Call > w.from && op.Return < w.to }) {
			st.lostWrites++
		}
	}
	st.epochs = len(epochs)
	st.epochChanges = max(len(epochs)-1, 0)
	return st
}

func (st *linStats) add(o linStats) {
	st.ops += o.ops
	st.unknown += o.unknown
	st.claimed += o.claimed
	st.busy += o.busy
	st.renewOK += o.renewOK
	st.staleRenews += o.staleRenews
	st.staleRenewRefused += o.staleRenewRefused
	st.finishOK += o.finishOK
	st.staleFinishFenced += o.staleFinishFenced
	st.staleFinishFinished += o.staleFinishFinished
	st.releaseOK += o.releaseOK
	st.readsHeld += o.readsHeld
	st.withdrawn += o.withdrawn
	st.blockersWithdrawn += o.blockersWithdrawn
	st.abandonOK += o.abandonOK
	st.dataLosses += o.dataLosses
	st.epochs += o.epochs
	st.epochChanges += o.epochChanges
	st.failovers += o.failovers
	st.lostWrites += o.lostWrites
	st.claimsAfterFailover += o.claimsAfterFailover
	st.fencesTwice += o.fencesTwice
}
