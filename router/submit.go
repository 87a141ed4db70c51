package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/delegation"
	"github.com/teamster-fleet/teamster/internal/retry"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/selection"
)

// submitTimeout bounds the Redis work of one submit (whose gateway waits
// longer than for other requests: client.Submit's own budget).
const submitTimeout = 10 * time.Second

// answerTimeout bounds the router's whole part of every other request a
// gateway makes (inject, a run's inject, cancel and read, source grant and
// revoke, session operations): its Redis work and any relay to a worker. It
// is inside a gateway's default request timeout (client's 10 s), so that a
// Redis or a worker that stopped answering gets the gateway a typed error
// (internal) before its own timeout, never silence. Redis calls end at their
// deadline (cmdutil sets ContextTimeoutEnabled).
const answerTimeout = 7 * time.Second

// SubmitPublishBudget is how long a submit keeps trying to publish its
// attempt (with the same Nats-Msg-Id, so JetStream stores it once however
// many tries reach the stream) before it withdraws the attempt and answers
// internal. It covers a JetStream stream leader election after the loss of
// a node: a follower campaigns 4 to 9 s (nats-server's election timeout)
// after its last heartbeat, and when its first campaign fails (the other
// follower's log is ahead) the election takes a second timeout; measured
// on a 3-node loopback cluster, 4 to 7 s usually, once more than 12 s
// ("NATS cluster" in docs/ARCHITECTURE.md). The Go client waits longer
// than this for one reply (client.submitTry) before it sends a submit
// again.
const SubmitPublishBudget = 20 * time.Second

// publishTry bounds one publish: a publish to a stream that has no leader
// is not answered at all, and the next try should not wait for it.
const publishTry = 2 * time.Second

// submit handles one submit, from caller c (its tenant from an identified
// subject, teamster.submit.gateway.<gatewayId> or a bound delegate's
// teamster.submit.delegate.<pluginId>.gateway.<gatewayId>; a delegate's
// plugin id from the subject, never the body): validate, select, record
// (reaper index, then record and order), publish with Nats-Msg-Id, reply.
// Every refusal is a typed rejected reply that changed no state. The
// attempt's session and id live in its tenant's namespace, so a tenant
// reaches, probes and collides with nothing of another's. An attempt id is
// bound to the attempt first accepted under it (its digest): a resubmit of
// that attempt is answered from its record, whatever selection or the
// delegation check would say now, and a different attempt under the id is
// refused.
func (r *Router) submit(m *nats.Msg, c caller) {
	delegate := c.delegate
	a, err := bus.DecodeSubmit(m.Data)
	if err == nil {
		err = c.checkAttempt(a)
	}
	if err != nil {
		r.log.WithField("code", teamster.CodeOf(err)).Debug("submit rejected: " + err.Error())
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	a.Tenant = c.tenant
	given := a.AttemptID != ""
	if !given {
		a.AttemptID = ulid.Make().String()
	}
	// The attempt's names in its tenant's namespace, built once.
	sk, id := a.ScopedSessionKey(), a.ScopedID()
	// The attempt's log fields are built only when something is logged: an
	// accepted submit logs nothing below debug level.
	log := func() logrus.FieldLogger { return r.attemptLog(a, c) }
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
	// A Redis failover (a Sentinel promotion, a Cluster shard's replica
	// taking over) refuses or drops commands for a few seconds: the accept
	// is tried again within the submit's budget. A retry is safe: the
	// accept is bound to the attempt's digest, so a try whose reply was
	// lost (it ran) is answered "exists" and goes on as a resubmit.
	var acc leases.Accepted
	tries := 0
	err = retry.For(ctx, submitTimeout, func() error {
		tries++
		var aerr error
		acc, aerr = r.store.Accept(ctx, leases.AcceptArgs{
			SessionKey: sk, AttemptID: id, Digest: digest, HarnessID: d.HarnessID, ReplyTo: a.ReplyTo,
			QueueTimeout: a.QueueTimeout(), RunBudget: a.Timeout() + a.SettlementTimeout(), Reply: replyBody,
		})
		if errors.Is(aerr, leases.ErrAttemptIDTaken) || errors.Is(aerr, leases.ErrAttemptReused) {
			return backoff.Permanent(aerr)
		}
		return aerr
	})
	if errors.Is(err, leases.ErrAttemptIDTaken) || errors.Is(err, leases.ErrAttemptReused) {
		log().Info("submit refused: " + err.Error())
		r.replySubmit(m, &bus.SubmitReply{V: bus.Version, Status: bus.StatusRejected, AttemptID: a.AttemptID, Error: teamster.AsError(err)})
		return
	}
	if err != nil {
		// The reply says nothing was recorded: make it so, in case a try
		// ran without its reply arriving.
		uctx, ucancel := context.WithTimeout(context.Background(), submitTimeout)
		_, _ = r.store.Unaccept(uctx, sk, id)
		ucancel()
		log().WithField("tries", tries).Error("submit failed: record the attempt: " + err.Error())
		r.replySubmit(m, rejectedInternal(a.AttemptID, "the fleet could not record the attempt"))
		return
	}
	if tries > 1 {
		log().WithField("tries", tries).Info("attempt recorded after failed tries (a Redis failover)")
	}
	if !acc.New {
		r.resubmitted(ctx, m, a, acc, delegate, log)
		return
	}
	if err := r.publishAttempt(d.HarnessID, id, attemptBody, delegate, log); err != nil {
		log().Error("submit failed: publish: " + err.Error())
		ok, uerr := r.store.Unaccept(context.Background(), sk, id)
		switch {
		case uerr == nil && !ok:
			// No longer queued: a try did reach the stream (only its
			// acknowledgement was lost) and a worker claimed it, or its
			// queue timeout passed while the router kept trying and a
			// reaper gave it its queue_timeout result. Either way the
			// attempt is accepted and its result will come; saying
			// otherwise would invite a second submit.
			log().Warn("the publish was not acknowledged but the attempt is no longer queued (claimed, or timed out): answering accepted")
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
	if r.steps.Enabled() {
		r.steps.Log(log().WithFields(logrus.Fields{"harness": d.HarnessID, "reason": d.Reason}), "accepted")
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
	acc, err := r.store.Known(ctx, a.ScopedSessionKey(), a.ScopedID(), digest)
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
//
// The publish is tried as long as a first submit's (SubmitPublishBudget).
// When it still fails, the record decides: while it is there the attempt
// stands (its first publish may well have reached the stream) and the
// answer is accepted, as always; when it is gone, the first submit, still
// publishing when this resubmit came, gave up and withdrew it, and the
// answer is internal, so the caller submits again (and that submit is a
// new one) instead of holding an accepted handle of an attempt nobody
// records.
func (r *Router) resubmitted(ctx context.Context, m *nats.Msg, a *bus.Attempt, acc leases.Accepted, delegate string, log func() logrus.FieldLogger) {
	if acc.State == leases.StateAccepted {
		recorded := *a
		recorded.ReplyTo = acc.ReplyTo
		body, err := bus.Encode(&recorded)
		if err == nil {
			err = r.publishAttempt(acc.HarnessID, a.ScopedID(), body, delegate, log)
		}
		if err != nil {
			log().Warn("resubmit: publish again failed: " + err.Error())
			kctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
			_, kerr := r.store.Attempt(kctx, a.ScopedSessionKey(), a.ScopedID())
			cancel()
			if errors.Is(kerr, leases.ErrNotFound) {
				log().Warn("resubmit: the attempt was withdrawn meanwhile (its first submit could not publish it): answering internal")
				r.replySubmit(m, rejectedInternal(a.AttemptID, "the fleet could not confirm the attempt was published; "+
					"submit it again with the same attemptId to learn its fate (a resubmit never runs it twice)"))
				return
			}
		}
	}
	if r.debug {
		log().WithFields(logrus.Fields{"state": acc.State, "harness": acc.HarnessID}).Debug("resubmit answered from the record")
	}
	r.countSubmit(bus.StatusAccepted, nil)
	r.respond(m, acc.Reply)
}

// publishAttempt publishes an attempt's message with Nats-Msg-Id
// bus.AttemptMsgID(scopedID).
// A try that fails for a reason that may pass (no answer while the stream
// elects a leader, no responders, a connection that is reconnecting) is
// tried again with backoff, each try bounded at publishTry, for
// SubmitPublishBudget from the first: every try carries the same message
// id, so JetStream stores the attempt once however many of them reach it
// (the duplicate window is 2 minutes, far longer than the budget). It
// returns the last try's error.
func (r *Router) publishAttempt(harnessID, scopedID string, body []byte, delegate string, log func() logrus.FieldLogger) error {
	start := time.Now()
	hdr := bus.DelegateHeader(delegate)
	err := r.publishOnce(context.Background(), harnessID, scopedID, body, hdr)
	if err == nil || permanentPublish(err) {
		return err
	}
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(SubmitPublishBudget))
	defer cancel()
	tries := 1
	last := err
	err = retry.For(ctx, time.Until(start.Add(SubmitPublishBudget)), func() error {
		tries++
		last = r.publishOnce(ctx, harnessID, scopedID, body, hdr)
		if last != nil && permanentPublish(last) {
			return backoff.Permanent(last)
		}
		return last
	})
	if err != nil {
		return fmt.Errorf("%d tries in %s: %w", tries, time.Since(start).Round(time.Millisecond), last)
	}
	log().WithFields(logrus.Fields{"tries": tries, "waited": time.Since(start).Round(time.Millisecond)}).Info(publishRetriedMsg)
	return nil
}

// publishRetriedMsg is logged when a publish went through after failed
// tries.
const publishRetriedMsg = "attempt published after failed tries"

// publishOnce is one try of publishAttempt, bounded at publishTry (and by
// ctx).
func (r *Router) publishOnce(ctx context.Context, harnessID, scopedID string, body []byte, hdr nats.Header) error {
	ctx, cancel := context.WithTimeout(ctx, publishTry)
	defer cancel()
	_, err := bus.PublishAttemptBody(ctx, r.js, harnessID, scopedID, body, hdr)
	return err
}

// permanentPublish says a publish error will not pass by trying again: the
// message itself is refused (an id or subject the contract forbids, a body
// over the connection's limit), or the router's connection is closed (the
// router is stopping).
func permanentPublish(err error) bool {
	var te *teamster.Error
	return errors.As(err, &te) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject)
}

// attemptLog is the logger of one submit: the attempt, the session (hashed,
// never raw), the tenant and the delegate, if any.
func (r *Router) attemptLog(a *bus.Attempt, c caller) logrus.FieldLogger {
	return r.log.WithFields(c.fields(logrus.Fields{"attempt": a.AttemptID, "session": leases.Tag(a.ScopedSessionKey())}))
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
	rec, err := r.store.Session(ctx, a.ScopedSessionKey())
	if err != nil && !errors.Is(err, leases.ErrNotFound) {
		return teamster.Errorf(teamster.CodeInternal, "read the session record: %v", err)
	}
	var pinned selection.Manifest
	if rec != nil {
		pinned, _ = r.registry.harnesses().Manifest(rec.AgentHarnessID)
	}
	return delegation.Check(a.DelegationRequest(delegate), rec, pinned)
}
