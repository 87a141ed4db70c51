package leases

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// How the linearizability clients claim: Keeper.Claim, or a claim script run bare.

// linHold is a client's hold on the session: the Lease Keeper.Claim
// returns, or, for a broken claim script, a bare fence finished and
// abandoned through the scripts (so that the test builds no Lease by hand).
type linHold interface {
	Fence() string
	Finish(ctx context.Context, o Outcome) (FinishStatus, error)
	Abandon(ctx context.Context, code string, result []byte) (FinishStatus, error)
}

// linClaimFunc claims an attempt: Keeper.Claim, or a broken variant. The
// hold is nil unless the status is Claimed; blocker is the attempt a busy
// claim names.
type linClaimFunc func(ctx context.Context, k *Keeper, session, attemptID string) (hold linHold, st ClaimStatus, blocker string, err error)

// linClientOptions are the options of a client that neither retries nor
// waits for a server to come back: a request that meets a restarting or
// killed Redis fails at once, so histories hold operations whose outcome is
// unknown (and no request runs twice, once on each side of a failover).
func linClientOptions() *redis.Options {
	return &redis.Options{MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: 5 * time.Millisecond}
}

// linStore is storeOn with a linClientOptions client.
func linStore(t *testing.T, o *redis.Options) *Store {
	t.Helper()
	c := redis.NewClient(o)
	c.AddHook(&slotHook{t: t})
	t.Cleanup(func() { c.Close() })
	s := NewStore(c)
	if err := s.Load(context.Background()); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	return s
}

// linStoreOn is linStore on the Redis at addr.
func linStoreOn(t *testing.T, addr string) *Store {
	t.Helper()
	o := linClientOptions()
	o.Addr = addr
	return linStore(t, o)
}

func keeperClaim(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, string, error) {
	l, res, err := k.Claim(ctx, session, attemptID, "codex")
	if err != nil || l == nil {
		return nil, res.Status, res.Blocker, err
	}
	return l, res.Status, "", nil
}

// claimWithScript runs another claim script with the claim script's
// documented keys and arguments, for the broken variants (and for tests
// that claim without a Keeper's lease).
func claimWithScript(script *redis.Script) func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, error) {
	claim := scriptClaim(script)
	return func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, error) {
		l, st, _, err := claim(ctx, k, session, attemptID)
		return l, st, err
	}
}

// scriptClaim is claimWithScript for the driver: it also returns the
// blocker a busy claim names.
func scriptClaim(script *redis.Script) linClaimFunc {
	return func(ctx context.Context, k *Keeper, session, attemptID string) (linHold, ClaimStatus, string, error) {
		keys := keysFor(session)
		res, err := script.Run(ctx, k.store.rdb,
			[]string{keys.order(), keys.attempt(attemptID), keys.lease(), keys.fence(), keys.session(), keys.node()},
			attemptID, k.holder, k.ttl.Milliseconds(), newEpoch(), SeqReservation, keys.prefix(), FinishedTTL.Milliseconds(),
			newEpoch(), 0, "codex", // a claim token; no quarantine; the harness
		).StringSlice()
		if err != nil {
			return nil, "", "", err
		}
		switch ClaimStatus(res[0]) {
		case Claimed:
			return &scriptHold{store: k.store, keys: keys, holder: k.holder, attemptID: attemptID, fence: res[1]}, Claimed, "", nil
		case ClaimBusy:
			if len(res) > 1 {
				return nil, ClaimBusy, res[1], nil
			}
		}
		return nil, ClaimStatus(res[0]), "", nil
	}
}

// scriptHold finishes and abandons through the scripts, as Lease.Finish and
// Lease.Abandon do.
type scriptHold struct {
	store     *Store
	keys      sessionKeys
	holder    string
	attemptID string
	fence     string
}

func (h *scriptHold) Fence() string { return h.fence }

func (h *scriptHold) Finish(ctx context.Context, o Outcome) (FinishStatus, error) {
	st, err := finishScript.Run(ctx, h.store.rdb,
		[]string{h.keys.order(), h.keys.attempt(h.attemptID), h.keys.lease(), h.keys.session()},
		h.attemptID, h.fence, o.Code, o.Result, FinishedTTL.Milliseconds(), h.holder).Text()
	return FinishStatus(st), err
}

func (h *scriptHold) Abandon(ctx context.Context, code string, result []byte) (FinishStatus, error) {
	st, err := abandonScript.Run(ctx, h.store.rdb,
		[]string{h.keys.order(), h.keys.attempt(h.attemptID), h.keys.lease()},
		h.attemptID, h.fence, code, result, FinishedTTL.Milliseconds(), h.holder).Text()
	return FinishStatus(st), err
}
