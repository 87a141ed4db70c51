package router

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/leases"
)

// onInject serves teamster.inject: it finds the session's running attempt
// from the session's lease (or takes the attemptId the request names) and
// forwards the request to teamster.run.<attemptId>.inject, where the worker
// running that attempt answers. Whichever worker runs the session's current
// turn, the inject reaches it.
func (r *Router) onInject(m *nats.Msg) {
	var req bus.InjectRequest
	if err := bus.Decode(m.Data, &req); err != nil {
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	if req.AttemptID == "" {
		if req.SessionKey == "" {
			r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected,
				Error: teamster.Errorf(teamster.CodeInvalidRequest, "an inject names a sessionKey or an attemptId")})
			return
		}
		l, err := r.store.LeaseOf(ctx, req.SessionKey)
		switch {
		case errors.Is(err, leases.ErrNotFound):
			r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected,
				Error: teamster.Errorf(teamster.CodeNoActiveRun, "no turn of the session is running")})
			return
		case err != nil:
			r.log.Warn("inject: read the lease: " + err.Error())
			r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected,
				Error: teamster.Errorf(teamster.CodeInternal, "the fleet could not find the running turn")})
			return
		}
		req.AttemptID = l.AttemptID
	}
	subj, err := bus.RunInjectSubject(req.AttemptID)
	if err != nil {
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	body, err := encodeInject(&req)
	if err != nil {
		// Every request gets a typed reply: a submitter that got none would
		// wait out its whole timeout for an answer that never comes.
		r.log.Warn("inject: encode the forwarded request: " + err.Error())
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: req.AttemptID,
			Error: teamster.Errorf(teamster.CodeInternal, "the fleet could not forward the inject")})
		return
	}
	rep, err := r.nc.RequestWithContext(ctx, subj, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: req.AttemptID,
			Error: teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running", req.AttemptID)})
		return
	case err != nil:
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: req.AttemptID,
			Error: teamster.Errorf(teamster.CodeInternal, "the worker did not answer: %v", err)})
		return
	}
	var ir bus.InjectReply
	if err := bus.Decode(rep.Data, &ir); err == nil {
		r.countInject(&ir)
	}
	r.respond(m, rep.Data)
}

// encodeInject encodes the request the router forwards to the run. It is a
// variable so that a test can make it fail: no request that decoding accepts
// fails to encode again (its strings are strings, its images were validated
// as JSON on the way in), so without it the reply to that failure could not
// be tested. Nothing but that test sets it.
var encodeInject = func(req *bus.InjectRequest) ([]byte, error) { return bus.Encode(req) }

func (r *Router) replyInject(m *nats.Msg, rep *bus.InjectReply) {
	r.countInject(rep)
	r.reply(m, rep)
}

func (r *Router) countInject(rep *bus.InjectReply) {
	if rep.Error != nil {
		r.m.Injected.WithLabelValues(string(rep.Error.Code)).Inc()
		return
	}
	r.m.Injected.WithLabelValues(rep.Status).Inc()
}

// onSourceGrant serves teamster.source.grant.
func (r *Router) onSourceGrant(m *nats.Msg) {
	var g bus.SourceGrant
	if err := bus.Decode(m.Data, &g); err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	if err := r.store.GrantSource(ctx, g.ID, g.Generation); err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	r.reply(m, bus.OK())
}

// onSourceRevoke serves teamster.source.revoke: the revoke is recorded in
// Redis (permanent for every generation up to the current one), then
// broadcast on teamster.source.revoked so that every worker drops the
// source's items in flight at once.
func (r *Router) onSourceRevoke(m *nats.Msg) {
	var rv bus.SourceRevoke
	if err := bus.Decode(m.Data, &rv); err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	gen, err := r.store.RevokeSource(ctx, rv.ID)
	if err != nil {
		r.log.Warn("revoke: " + err.Error())
		r.reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInternal, "the revoke could not be recorded")))
		return
	}
	body, _ := bus.Encode(&rv)
	if err := r.nc.Publish(bus.SubjectSourceRevoked, body); err != nil {
		r.log.Warn("revoke broadcast not sent (workers still refuse on their next check): " + err.Error())
	}
	r.log.WithFields(logrus.Fields{"source": rv.ID, "generation": gen}).Info("source revoked")
	r.reply(m, bus.OK())
}
