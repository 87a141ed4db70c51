package selection

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
)

// Digest identifies what the policy decides: two policies with one digest
// resolve every runtime alike, whatever their files' names, layout or
// unrelated keys (origins and notes do not count; the ignored legacy
// settings do not either). The nil policy (all auto) has a digest too. It is
// 12 hex digits of a SHA-256, what routers advertise so that operators see
// routers that would answer one submit differently.
func (p *Policy) Digest() string {
	h := sha256.New()
	if p != nil {
		for _, id := range slices.Sorted(maps.Keys(p.providers)) {
			pp := p.providers[id]
			fmt.Fprintf(h, "provider %q %q\n", id, pp.runtime.runtime)
			for _, m := range slices.Sorted(maps.Keys(pp.models)) {
				fmt.Fprintf(h, "provider %q model %q %q\n", id, m, pp.models[m].runtime)
			}
		}
		digestModels(h, "defaults", p.defaults)
		for _, id := range slices.Sorted(maps.Keys(p.agents)) {
			digestModels(h, fmt.Sprintf("agent %q", id), p.agents[id].models)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:6])
}

func digestModels(h hash.Hash, scope string, ms modelSettings) {
	for _, prov := range slices.Sorted(maps.Keys(ms.exact)) {
		for _, m := range slices.Sorted(maps.Keys(ms.exact[prov])) {
			fmt.Fprintf(h, "%s %q/%q %q\n", scope, prov, m, ms.exact[prov][m].runtime)
		}
	}
	for _, prov := range slices.Sorted(maps.Keys(ms.wildcard)) {
		fmt.Fprintf(h, "%s %q/* %q\n", scope, prov, ms.wildcard[prov].runtime)
	}
}
