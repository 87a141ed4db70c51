package leases

import (
	"context"
	"fmt"
	"strconv"

	"github.com/teamster-fleet/teamster"
)

// GrantSource grants source id (scoped: teamster.Scope) the given
// generation. A generation at or below a revoked one, or below the current
// one, is refused with invalid_request.
func (s *Store) GrantSource(ctx context.Context, id string, generation int64) error {
	_, name := teamster.Unscope(id)
	if generation < 1 || generation > maxGeneration {
		return teamster.Errorf(teamster.CodeInvalidRequest, "source %s: generation %d is outside 1..2^53-1", name, generation)
	}
	res, err := grantScript.Run(ctx, s.rdb, []string{sourceKey(id)}, generation).StringSlice()
	if err != nil {
		return fmt.Errorf("grant source: %w", err)
	}
	if len(res) == 2 && res[0] == "ok" {
		return nil
	}
	var min int64
	if len(res) == 2 {
		min, _ = strconv.ParseInt(res[1], 10, 64)
	}
	if min > maxGeneration {
		return teamster.Errorf(teamster.CodeInvalidRequest, "source %s: every generation up to %d is revoked; the source can never be granted again", name, int64(maxGeneration))
	}
	return teamster.Errorf(teamster.CodeInvalidRequest, "source %s: generation %d is stale; a new grant needs at least %d", name, generation, min)
}

// RevokeSource revokes source id, permanently for every generation up to the
// current one. It returns the highest revoked generation.
func (s *Store) RevokeSource(ctx context.Context, id string) (int64, error) {
	n, err := revokeScript.Run(ctx, s.rdb, []string{sourceKey(id)}).Int64()
	if err != nil {
		return 0, fmt.Errorf("revoke source: %w", err)
	}
	return n, nil
}

// SourceCurrent reports whether source id is authorised at exactly generation:
// granted at that generation and not revoked.
func (s *Store) SourceCurrent(ctx context.Context, id string, generation int64) (bool, error) {
	vals, err := s.rdb.HMGet(ctx, sourceKey(id), "generation", "revoked").Result()
	if err != nil {
		return false, err
	}
	g := parseInt(vals[0])
	revoked := parseInt(vals[1])
	return g == generation && generation > revoked, nil
}

func parseInt(v any) int64 {
	s, ok := v.(string)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// maxGeneration is the largest generation the scripts compare exactly.
const maxGeneration = 1<<53 - 1
