package router

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/delegation"
	"github.com/teamster-fleet/teamster/leases"
)

// harnessResetTimeout bounds the call to a worker's harness reset.
const harnessResetTimeout = 5 * time.Second

// onSessionOp serves teamster.session.<op>: owner-only operations on a
// session's record. A request carrying a delegate identity (the
// Teamster-Delegate header or a "delegate" key in the body) is owner_only,
// whatever NATS permissions let through; while a turn of the session runs,
// every operation is session_busy.
//
// The session key is the caller's (its tenant's namespace): another
// tenant's session of the same key is a different session.
func (r *Router) onSessionOp(m *nats.Msg, c caller) {
	op, err := bus.SessionOpFromSubject(m.Subject)
	if err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	body, fromDelegate, err := bus.DecodeSessionOp(m.Data)
	if err != nil {
		r.reply(m, bus.Rejected(err))
		return
	}
	delegate := m.Header.Get(bus.HeaderDelegate)
	if delegate == "" && fromDelegate {
		delegate = "(declared in the body)"
	}
	if err := delegation.OwnerOnly(delegate, op); err != nil {
		r.log.WithFields(c.fields(logrus.Fields{"session": leases.Tag(c.scope(body.SessionKey)), "op": op})).Warn("session op refused: owner only")
		r.reply(m, bus.Rejected(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	fields := leases.FieldsOf(body.SessionKey, body.SessionID, body.StorePath, body.AgentID, body.AgentHarnessID, body.ModelSelectionLocked)
	res, err := r.store.SessionOp(ctx, c.scope(body.SessionKey), op, fields)
	log := r.log.WithFields(c.fields(logrus.Fields{"session": leases.Tag(c.scope(body.SessionKey)), "op": op}))
	switch {
	case err != nil:
		log.Error("session op failed: " + err.Error())
		r.reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInternal, "the session operation could not be applied")))
		return
	case res.Status == leases.SessionOpBusy:
		r.reply(m, bus.Rejected(teamster.Errorf(teamster.CodeSessionBusy, "a turn of the session is running; %s it between turns", op)))
		return
	case res.Status == leases.SessionOpExists:
		r.reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInvalidRequest, "the session already has a record; patch it instead")))
		return
	case res.Status == leases.SessionOpMissing && (op == leases.OpReset || op == leases.OpDelete):
		// Nothing to reset or delete: done, and said so.
		log.Info("session op: no record, nothing to do")
		r.reply(m, &bus.Reply{V: bus.Version, Status: bus.StatusOK, NoRecord: true})
		return
	case res.Status == leases.SessionOpMissing:
		r.reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInvalidRequest, "the session has no record; create it first")))
		return
	case res.Status != leases.SessionOpOK:
		log.Error("session op: unexpected status " + string(res.Status))
		r.reply(m, bus.Rejected(teamster.Errorf(teamster.CodeInternal, "the session operation could not be applied")))
		return
	}
	log.Info("session op applied")
	if (op == leases.OpReset || op == leases.OpDelete) && res.PinnedHarness != "" && res.PreviousBinding != "" {
		r.resetHarness(ctx, log, body.SessionKey, res.PinnedHarness, res.PreviousBinding)
	}
	if res.PreviousState != "" {
		r.deleteState(ctx, log, res.PreviousState)
	}
	r.reply(m, bus.OK())
}

// deleteState removes the native state object a reset or deleted record
// named. The record no longer names it, so no turn can restore it; an object
// that cannot be deleted now stays as an orphan, logged with its name.
func (r *Router) deleteState(ctx context.Context, log logrus.FieldLogger, name string) {
	if err := bus.RetryTransient(ctx, harnessResetTimeout, func(error) {}, func(ctx context.Context) error {
		return r.state.Delete(ctx, name)
	}); err != nil {
		log.WithField("object", name).Warn("native state not deleted (the record no longer names it): " + err.Error())
	}
}

// resetHarness asks a worker hosting the session's pinned harness to clear
// its native state for the session. The record is already reset: a harness
// that cannot be reached now keeps a stale side file at worst, which the next
// turn does not use (its binding is gone).
func (r *Router) resetHarness(ctx context.Context, log logrus.FieldLogger, sessionKey, harnessID, binding string) {
	subj, err := bus.HarnessResetSubject(harnessID)
	if err != nil {
		return
	}
	body, err := bus.Encode(&bus.HarnessReset{V: bus.Version, SessionKey: sessionKey, Binding: json.RawMessage(binding)})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, harnessResetTimeout)
	defer cancel()
	msg, err := r.nc.RequestWithContext(ctx, subj, body)
	if err != nil {
		log.WithField("harness", harnessID).Warn("harness reset not delivered (the record is reset): " + err.Error())
		return
	}
	var rep bus.Reply
	if err := bus.Decode(msg.Data, &rep); err != nil || rep.Err() != nil {
		log.WithField("harness", harnessID).Warn("harness reset failed (the record is reset)")
	}
}
