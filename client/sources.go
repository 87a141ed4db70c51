package client

import (
	"context"

	"github.com/teamster-fleet/teamster/bus"
)

// Source authorities: the generation a source (a chat, a voice line) is
// granted, which source-bound input must carry to be dispatched (Inject).

// GrantSource grants source id the given generation (a new grant must be
// higher than any revoked one).
func (c *Client) GrantSource(ctx context.Context, id string, generation int64) error {
	var rep bus.Reply
	if err := c.request(ctx, bus.SubjectSourceGrant, nil, &bus.SourceGrant{V: bus.Version, ID: id, Generation: generation}, &rep); err != nil {
		return err
	}
	return rep.Err()
}

// RevokeSource revokes source id, permanently for every generation up to the
// current one. Source-bound input of that source in flight is dropped with
// source_revoked.
func (c *Client) RevokeSource(ctx context.Context, id string) error {
	var rep bus.Reply
	if err := c.request(ctx, bus.SubjectSourceRevoke, nil, &bus.SourceRevoke{V: bus.Version, ID: id}, &rep); err != nil {
		return err
	}
	return rep.Err()
}
