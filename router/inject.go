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
// and its worker from the session's lease (or the attempt the request names,
// from its record) and forwards the request to
// teamster.worker.<workerId>.run.<attemptId>.inject, where only the worker
// running that attempt listens. Whichever worker runs the session's current
// turn, the inject reaches it, and no other worker hears it.
//
// The session key or attempt id is the caller's (its tenant's namespace): a
// session or attempt of another tenant is, to the caller, one that does not
// exist, and its answer says no more than that.
func (r *Router) onInject(m *nats.Msg, c caller) {
	var req bus.InjectRequest
	if err := bus.Decode(m.Data, &req); err != nil {
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	if req.AttemptID == "" && req.SessionKey == "" {
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected,
			Error: teamster.Errorf(teamster.CodeInvalidRequest, "an inject names a sessionKey or an attemptId")})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	var worker, scopedID string
	var err error
	if req.AttemptID == "" {
		scopedID, worker, err = r.runningTurn(ctx, c.scope(req.SessionKey))
		_, req.AttemptID = teamster.Unscope(scopedID)
	} else {
		if err = bus.CheckID("attemptId", req.AttemptID); err == nil {
			scopedID = c.scope(req.AttemptID)
			worker, err = r.runningWorker(ctx, scopedID)
		}
	}
	if err != nil {
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: req.AttemptID, Error: teamster.AsError(err)})
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
	rep, err := r.relay(ctx, worker, scopedID, "inject", body)
	if err != nil {
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: req.AttemptID, Error: teamster.AsError(err)})
		return
	}
	var ir bus.InjectReply
	if err := bus.Decode(rep, &ir); err == nil {
		r.countInject(&ir)
	}
	r.respond(m, rep)
}

// onRunRequest serves teamster.run.<attemptId>.inject and .cancel: it relays
// the request, body unchanged, to the worker running the attempt (its
// record names it) and the worker's answer back. An inject relayed here is
// checked by the worker exactly as one through teamster.inject.
func (r *Router) onRunRequest(m *nats.Msg, c caller) {
	id, request, err := bus.RunOf(m.Subject)
	if err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	worker, err := r.runningWorker(ctx, c.scope(id))
	if err == nil {
		var rep []byte
		if rep, err = r.relay(ctx, worker, c.scope(id), request, m.Data); err == nil {
			r.respond(m, rep)
			return
		}
	}
	if request == "inject" {
		r.replyInject(m, &bus.InjectReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: id, Error: teamster.AsError(err)})
		return
	}
	r.reply(m, bus.Rejected(err))
}

// runningTurn returns the attempt (its scoped id) and the worker of the
// session's running turn, from its lease; no_active_run when it has none.
// sessionKey is scoped (teamster.Scope).
func (r *Router) runningTurn(ctx context.Context, sessionKey string) (scopedID, worker string, err error) {
	l, err := r.store.LeaseOf(ctx, sessionKey)
	switch {
	case errors.Is(err, leases.ErrNotFound):
		return "", "", teamster.Errorf(teamster.CodeNoActiveRun, "no turn of the session is running")
	case err != nil:
		r.log.Warn("inject: read the lease: " + err.Error())
		return "", "", teamster.Errorf(teamster.CodeInternal, "the fleet could not find the running turn")
	}
	return l.AttemptID, l.Holder, nil
}

// runningWorker returns the worker running an attempt (its scoped id), from
// its record; no_active_run when it is not running (queued, finished,
// unknown, another tenant's: all the same to the caller).
func (r *Router) runningWorker(ctx context.Context, scopedID string) (string, error) {
	_, attemptID := teamster.Unscope(scopedID)
	if err := bus.CheckID("attemptId", attemptID); err != nil {
		return "", err
	}
	v, err := r.store.AttemptByID(ctx, scopedID)
	switch {
	case errors.Is(err, leases.ErrNotFound):
		return "", teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running", attemptID)
	case err != nil:
		r.log.WithField("attempt", teamster.ScopedDisplay(scopedID)).Warn("run request: read the attempt: " + err.Error())
		return "", teamster.Errorf(teamster.CodeInternal, "the fleet could not find the running turn")
	case !v.Running() || v.WorkerID == "":
		return "", teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running", attemptID)
	}
	return v.WorkerID, nil
}

// relay sends a run request to the worker's run subject
// (bus.WorkerRunSubject) and returns the worker's answer; no_active_run when
// that worker no longer serves the attempt.
func (r *Router) relay(ctx context.Context, worker, scopedID, request string, body []byte) ([]byte, error) {
	_, attemptID := teamster.Unscope(scopedID)
	subj, err := bus.WorkerRunSubject(worker, scopedID, request)
	if err != nil {
		return nil, err
	}
	rep, err := r.nc.RequestWithContext(ctx, subj, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, teamster.Errorf(teamster.CodeNoActiveRun, "attempt %s is not running", attemptID)
	case err != nil:
		return nil, teamster.Errorf(teamster.CodeInternal, "the worker did not answer: %v", err)
	}
	return rep.Data, nil
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

// onSourceGrant serves teamster.source.grant: the source id is the
// caller's (its tenant's namespace), so no tenant can grant, burn or learn
// another's sources.
func (r *Router) onSourceGrant(m *nats.Msg, c caller) {
	var g bus.SourceGrant
	if err := bus.Decode(m.Data, &g); err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	if err := r.store.GrantSource(ctx, c.scope(g.ID), g.Generation); err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	r.reply(m, bus.OK())
}

// onSourceRevoke serves teamster.source.revoke: the revoke is recorded in
// Redis (permanent for every generation up to the current one), then
// broadcast on teamster.source.revoked so that every worker drops the
// source's items in flight at once.
func (r *Router) onSourceRevoke(m *nats.Msg, c caller) {
	var rv bus.SourceRevoke
	if err := bus.Decode(m.Data, &rv); err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	gen, err := r.store.RevokeSource(ctx, c.scope(rv.ID))
	if err != nil {
		r.log.Warn("revoke: " + err.Error())
		r.reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInternal, "the revoke could not be recorded")))
		return
	}
	body, _ := bus.Encode(&bus.SourceRevoked{V: bus.Version, Tenant: c.tenant, ID: rv.ID})
	if err := r.nc.Publish(bus.SubjectSourceRevoked, body); err != nil {
		r.log.Warn("revoke broadcast not sent (workers still refuse on their next check): " + err.Error())
	}
	r.log.WithFields(c.fields(logrus.Fields{"source": rv.ID, "generation": gen})).Info("source revoked")
	r.reply(m, bus.OK())
}
