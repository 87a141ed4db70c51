package leases

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/teamster-fleet/teamster/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// newStore flushes the shared redis-server and returns a Store whose client
// checks, on every script call, that all the keys it is given (and the
// session prefix it derives keys from) lie in one hash slot.
func newStore(t *testing.T, opts ...StoreOption) *Store {
	t.Helper()
	env.FlushRedis(t)
	return storeOn(t, env.Redis.Addr(), opts...)
}

func storeOn(t *testing.T, addr string, opts ...StoreOption) *Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	c.AddHook(&slotHook{t: t})
	t.Cleanup(func() { c.Close() })
	s := NewStore(c, opts...)
	if err := s.Load(context.Background()); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	return s
}

// scriptsSeen records which scripts (by SHA) any test ran, so the slot test
// can show that its check covered every script.
var scriptsSeen sync.Map

// slotHook fails the test when a script call is given keys of more than one
// hash slot.
type slotHook struct{ t *testing.T }

func (h *slotHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *slotHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check(cmd)
		return next(ctx, cmd)
	}
}

func (h *slotHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.check(c)
		}
		return next(ctx, cmds)
	}
}

func (h *slotHook) check(cmd redis.Cmder) {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" {
		return
	}
	args := cmd.Args()
	sha, _ := args[1].(string)
	if name == "eval" {
		sha = redis.NewScript(sha).Hash()
	}
	scriptsSeen.Store(sha, true)
	n := toInt(args[2])
	keys := make([]string, 0, n+1)
	for i := 0; i < n; i++ {
		keys = append(keys, args[3+i].(string))
	}
	// The session prefix handed to scripts that derive keys from it.
	for _, a := range args[3+n:] {
		if s, ok := a.(string); ok && strings.HasPrefix(s, keyRoot+"{") && strings.HasSuffix(s, "}:") {
			keys = append(keys, s)
		}
	}
	if len(keys) == 0 {
		h.t.Errorf("script %s called with no keys", sha[:8])
		return
	}
	want := hashSlot(keys[0])
	for _, k := range keys[1:] {
		if got := hashSlot(k); got != want {
			h.t.Errorf("script %s: key %q is in slot %d, key %q in slot %d", sha[:8], keys[0], want, k, got)
		}
	}
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	}
	return 0
}
