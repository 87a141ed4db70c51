package router

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/delegation"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
)

// submitTimeout bounds the Redis and JetStream work of one submit.
const submitTimeout = 10 * time.Second

func (r *Router) onSubmit(m *nats.Msg) { r.submit(m, "") }

// onSubmitDelegate serves teamster.submit.delegate.<pluginId>: the delegate's
// identity is the subject's last token, never anything in the body.
func (r *Router) onSubmitDelegate(m *nats.Msg) {
	delegate, err := bus.DelegateFromSubject(m.Subject)
	if err != nil {
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	r.submit(m, delegate)
}

// submit handles one submit (delegate is "" for the owner): validate, select,
// record (reaper index, then record and order), publish with Nats-Msg-Id,
// reply. Every refusal is a typed rejected reply that changed no state. An
// attempt id is bound to the attempt first accepted under it (its digest): a
// resubmit of that attempt is answered from its record, whatever selection
// or the delegation check would say now, and a different attempt under the
// id is refused.
func (r *Router) submit(m *nats.Msg, delegate string) {
	a, err := bus.DecodeSubmit(m.Data)
	if err != nil {
		r.log.WithField("code", teamster.CodeOf(err)).Debug("submit rejected: " + err.Error())
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	given := a.AttemptID != ""
	if !given {
		a.AttemptID = ulid.Make().String()
	}
	// The attempt's log fields are built only when something is logged: an
	// accepted submit logs nothing below debug level.
	log := func() logrus.FieldLogger { return r.attemptLog(a, delegate) }
	digest, err := bus.AttemptDigest(a, delegate)
	if err != nil {
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID, Error: teamster.AsError(err)})
		return
	}
	// refuse answers a submit that cannot be accepted now, unless its id
	// was accepted before: then it is a resubmit, answered from the record
	// (the registry or the session may have changed since).
	refuse := func(rep *bus.SubmitReply) {
		if given && r.answerKnown(m, a, digest, delegate, log) {
			return
		}
		r.replySubmit(m, rep)
	}
	if delegate != "" {
		if err := r.checkDelegate(delegate, a); err != nil {
			log().WithField("field", delegation.DeniedField(err)).Info("delegated submit refused")
			refuse(&bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID, Error: teamster.AsError(err)})
			return
		}
	}
	d, err := r.registry.harnesses().Select(r.policy, factsOf(a))
	rec := d.Record
	rec.SessionKey = a.SessionKey
	if r.debug {
		logSelection(log(), &rec, err)
	}
	if err != nil {
		refuse(&bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID, Selection: &rec, Error: teamster.AsError(err)})
		return
	}
	if d.Embedded() {
		// No worker hosts the embedded runtime: the gateway runs the turn.
		refuse(&bus.SubmitReply{V: bus.Version, Status: bus.StatusFallback, AttemptID: a.AttemptID, HarnessID: d.HarnessID, Selection: &rec})
		return
	}
	// The attempt the workers read is the normalised one (id, defaults),
	// re-encoded; it must fit the readers' limit too.
	attemptBody, err := bus.Encode(a)
	if err != nil || len(attemptBody) > bus.MaxBody {
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID,
			Error: teamster.Errorf(teamster.CodePayloadTooLarge, "the attempt is over the %d byte limit once normalised (id and defaults added, re-encoded)", bus.MaxBody)})
		return
	}
	accepted := &bus.SubmitReply{V: bus.Version, Status: bus.StatusAccepted, AttemptID: a.AttemptID, HarnessID: d.HarnessID, Selection: &rec}
	replyBody, err := bus.Encode(accepted)
	if err != nil {
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID, Error: teamster.AsError(err)})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	acc, err := r.store.Accept(ctx, leases.AcceptArgs{
		SessionKey: a.SessionKey, AttemptID: a.AttemptID, Digest: digest, HarnessID: d.HarnessID, ReplyTo: a.ReplyTo,
		QueueTimeout: a.QueueTimeout(), RunBudget: a.Timeout() + a.SettlementTimeout(), Reply: replyBody,
	})
	if errors.Is(err, leases.ErrAttemptIDTaken) || errors.Is(err, leases.ErrAttemptReused) {
		log().Info("submit refused: " + err.Error())
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID, Error: teamster.AsError(err)})
		return
	}
	if err != nil {
		log().Error("submit failed: record the attempt: " + err.Error())
		r.replySubmit(m, rejectedInternal(a.AttemptID, "the fleet could not record the attempt"))
		return
	}
	if !acc.New {
		r.resubmitted(ctx, m, a, acc, delegate, log)
		return
	}
	if _, err := bus.PublishAttemptBody(ctx, r.js, d.HarnessID, a.AttemptID, attemptBody, bus.DelegateHeader(delegate)); err != nil {
		log().Error("submit failed: publish: " + err.Error())
		ok, uerr := r.store.Unaccept(context.Background(), a.SessionKey, a.AttemptID)
		switch {
		case uerr == nil && !ok:
			// No longer queued: the publish did reach the stream (only its
			// acknowledgement was lost) and a worker claimed it. The attempt
			// is accepted; saying otherwise would invite a second submit.
			log().Warn("the publish was not acknowledged but the attempt was claimed: answering accepted")
			r.countSubmit(bus.StatusAccepted, nil)
			r.respond(m, replyBody)
			return
		case uerr != nil:
			log().Warn("could not withdraw the unpublished attempt; the reaper will time it out")
		}
		r.replySubmit(m, rejectedInternal(a.AttemptID, "the fleet could not confirm the attempt was published; "+
			"submit it again with the same attemptId to learn its fate (a resubmit never runs it twice)"))
		return
	}
	if r.debug {
		log().WithField("harness", d.HarnessID).Debug("accepted")
	}
	r.countSubmit(bus.StatusAccepted, nil)
	r.respond(m, replyBody)
}

// answerKnown answers a submit that would be refused now from the record of
// its attempt id, and reports whether it did: a resubmit of the accepted
// attempt gets the accepted reply (and its message again while it is
// queued); another attempt under the id is invalid_request. It answers
// nothing (false) when the id has no record, or Redis cannot tell: the
// refusal stands.
func (r *Router) answerKnown(m *nats.Msg, a *bus.Attempt, digest, delegate string, log func() logrus.FieldLogger) bool {
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	acc, err := r.store.Known(ctx, a.SessionKey, a.AttemptID, digest)
	switch {
	case errors.Is(err, leases.ErrNotFound):
		return false
	case errors.Is(err, leases.ErrAttemptReused):
		log().Info("submit refused: " + err.Error())
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID, Error: teamster.AsError(err)})
		return true
	case err != nil:
		log().Warn("could not look up the attempt id; answering the refusal: " + err.Error())
		return false
	}
	r.resubmitted(ctx, m, a, acc, delegate, log)
	return true
}

// resubmitted answers a resubmit of an accepted attempt from its record.
// While the attempt is still queued it publishes it again, to the harness it
// was accepted for and with the replyTo it was accepted with, so the message
// is byte for byte the one first published (the digest says the rest is the
// same): a no-op inside JetStream's duplicate window, and after it a second
// copy that the claim answers "done". A first submit whose publish failed
// cannot strand this caller.
func (r *Router) resubmitted(ctx context.Context, m *nats.Msg, a *bus.Attempt, acc leases.Accepted, delegate string, log func() logrus.FieldLogger) {
	if acc.State == leases.StateAccepted {
		recorded := *a
		recorded.ReplyTo = acc.ReplyTo
		body, err := bus.Encode(&recorded)
		if err == nil {
			_, err = bus.PublishAttemptBody(ctx, r.js, acc.HarnessID, a.AttemptID, body, bus.DelegateHeader(delegate))
		}
		if err != nil {
			log().Warn("resubmit: publish again failed: " + err.Error())
		}
	}
	if r.debug {
		log().WithFields(logrus.Fields{"state": acc.State, "harness": acc.HarnessID}).Debug("resubmit answered from the record")
	}
	r.countSubmit(bus.StatusAccepted, nil)
	r.respond(m, acc.Reply)
}

// attemptLog is the logger of one submit: the attempt, the session (hashed,
// never raw) and the delegate, if any.
func (r *Router) attemptLog(a *bus.Attempt, delegate string) logrus.FieldLogger {
	f := logrus.Fields{"attempt": a.AttemptID, "session": leases.Tag(a.SessionKey)}
	if delegate != "" {
		f["delegate"] = delegate
	}
	return r.log.WithFields(f)
}

func rejectedInternal(attemptID, msg string) *bus.SubmitReply {
	return &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: attemptID,
		Error: teamster.Errorf(teamster.CodeInternal, "%s", msg)}
}

// factsOf is what selection knows of an attempt.
func factsOf(a *bus.Attempt) selection.Facts {
	return selection.Facts{
		Provider: a.Provider, ModelID: a.ModelID, SessionKey: a.SessionKey, AgentID: a.AgentID,
		AgentHarnessID: a.AgentHarnessID, AgentHarnessRuntimeOverride: a.AgentHarnessRuntimeOverride,
		Routes: a.SelectionRoutes(),
	}
}

// logSelection logs the selection record at debug level, as fields (the
// session key hashed, never raw).
func logSelection(log logrus.FieldLogger, rec *selection.Record, err error) {
	fields := logrus.Fields{
		"provider": rec.Provider, "model": rec.ModelID, "runtime": rec.Runtime, "runtime_source": rec.RuntimeSource,
		"selected": rec.SelectedHarnessID, "reason": rec.SelectedReason, "candidates": candidatesField(rec.Candidates),
	}
	if len(rec.Notes) > 0 {
		fields["notes"] = rec.Notes
	}
	if err != nil {
		fields["code"] = teamster.CodeOf(err)
	}
	log.WithFields(fields).Debug("agent harness selected")
}

func candidatesField(cs []selection.Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		s := c.ID + ":unsupported"
		if c.Supported {
			s = c.ID + ":supported"
		}
		if c.Reason != "" {
			s += " (" + c.Reason + ")"
		}
		out[i] = s
	}
	return out
}

// replySubmit answers a submit and counts it.
func (r *Router) replySubmit(m *nats.Msg, rep *bus.SubmitReply) {
	r.countSubmit(rep.Status, rep.Error)
	r.reply(m, rep)
}

func (r *Router) countSubmit(status string, e *teamster.Error) {
	r.m.Submitted.WithLabelValues(status).Inc()
	if e != nil {
		r.m.Rejected.WithLabelValues(string(e.Code)).Inc()
	}
}

func (r *Router) reply(m *nats.Msg, v any) {
	b, err := bus.Encode(v)
	if err != nil {
		r.log.Error(err.Error())
		return
	}
	r.respond(m, b)
}

func (r *Router) respond(m *nats.Msg, b []byte) {
	if m.Reply == "" {
		return
	}
	if err := m.Respond(b); err != nil {
		r.log.Debug("reply not sent: " + err.Error())
	}
}

// checkDelegate runs the delegated-execution check at submit, against the
// stored session record and the pinned harness's manifest in the registry.
// The worker checks again under the lease, and its check is the one that
// counts.
func (r *Router) checkDelegate(delegate string, a *bus.Attempt) error {
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	rec, err := r.store.Session(ctx, a.SessionKey)
	if err != nil && !errors.Is(err, leases.ErrNotFound) {
		return teamster.Errorf(teamster.CodeInternal, "read the session record: %v", err)
	}
	var pinned selection.Manifest
	if rec != nil {
		pinned, _ = r.registry.harnesses().Manifest(rec.AgentHarnessID)
	}
	return delegation.Check(a.DelegationRequest(delegate), rec.Delegation(), pinned)
}
