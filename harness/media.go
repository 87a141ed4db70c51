package harness

import (
	"github.com/teamster-fleet/teamster"
)

// CheckHostOwnedMedia checks OpenClaw's rule for hostOwnedToolMediaUrls:
// every host-owned URL must also be one of toolMediaURLs, compared exactly.
// A host-owned URL names a native artifact the trusted harness runtime
// created and stored itself; it may never add media the turn's tools did not
// present.
//
// The error is harness_failed: the list is the harness's own output, so a
// violation is a harness defect, not a bad request. The message names the
// offending entry by its index only, since media URLs may carry signed
// access tokens.
func CheckHostOwnedMedia(toolMediaURLs, hostOwned []string) error {
	if len(hostOwned) == 0 {
		return nil
	}
	presented := make(map[string]bool, len(toolMediaURLs))
	for _, u := range toolMediaURLs {
		presented[u] = true
	}
	for i, u := range hostOwned {
		if !presented[u] {
			return teamster.Errorf(teamster.CodeHarnessFailed,
				"hostOwnedToolMediaUrls[%d] is not among the turn's %d toolMediaUrls; host-owned media must be a subset of the tool media",
				i, len(toolMediaURLs))
		}
	}
	return nil
}

// CheckToolMedia applies CheckHostOwnedMedia to the outcome's media.
func (o *Outcome) CheckToolMedia() error {
	return CheckHostOwnedMedia(o.ToolMediaURLs, o.HostOwnedToolMediaURLs)
}
