package router

import (
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// caller is who sent a request, as its subject says (never its body): the
// tenant it acts for, and for a delegate its plugin id.
type caller struct {
	// tenant is the gateway: the identified subject's last token, or a
	// delegate's bound gateway; "" for the unnamed tenant (a plain subject).
	tenant string
	// delegate is a delegate's plugin id; "" for a gateway.
	delegate string
}

// inbox is the prefix every reply subject of the caller lies under: its own
// inbox (bus.InboxPrefix), which the shipped NATS permissions let only it
// read; _INBOX for the unnamed tenant. A router answers nothing, and a worker
// sends no event, anywhere else: a sender cannot make the fleet publish on
// another tenant's inbox or on a fleet subject (a result, an attempt, a
// registry entry).
func (c caller) inbox() string { return bus.SenderInbox(c.tenant, c.delegate) }

// allows reports whether subject lies under the caller's inbox.
func (c caller) allows(subject string) bool { return bus.Under(c.inbox(), subject) }

// scope is name in the caller's namespace (teamster.Scope).
func (c caller) scope(name string) string { return teamster.Scope(c.tenant, name) }

// fields are the caller's log fields.
func (c caller) fields(f logrus.Fields) logrus.Fields {
	if c.tenant != "" {
		f["tenant"] = c.tenant
	}
	if c.delegate != "" {
		f["delegate"] = c.delegate
	}
	return f
}

// A request kind: how a subscription's subjects name their caller.
type kind int

const (
	plain      kind = iota // the unnamed tenant's subject
	identified             // <subject>.gateway.<gatewayId>
)

// callerOf is who sent m on a subscription of kind k (delegates: whether
// the plain subject is teamster.submit.delegate.<pluginId>). For an
// identified subject, m.Subject becomes the plain one, so that handlers
// parse one form.
func callerOf(m *nats.Msg, k kind, delegates bool) (caller, error) {
	var c caller
	if k == identified {
		plainSubject, gateway, err := bus.SplitIdentified(m.Subject)
		if err != nil {
			return c, err
		}
		m.Subject, c.tenant = plainSubject, gateway
	}
	if delegates {
		d, err := bus.DelegateFromSubject(m.Subject)
		if err != nil {
			return c, err
		}
		c.delegate = d
	}
	return c, nil
}

// admit decides whether a request is served: its caller from its subject,
// and its reply subject under the caller's inbox (or none). A request whose
// reply subject lies elsewhere is dropped unanswered and changes nothing: it
// could only be an attempt to make the router publish where its sender may
// not.
func (r *Router) admit(m *nats.Msg, k kind, delegates bool) (caller, bool) {
	c, err := callerOf(m, k, delegates)
	if m.Reply != "" && !c.allows(m.Reply) {
		r.m.Unanswerable.Inc()
		if r.debug {
			r.log.WithFields(c.fields(logrus.Fields{"subject": m.Subject})).Debug("request dropped: its reply subject is outside the sender's inbox")
		}
		return c, false
	}
	if err != nil {
		r.reply(m, bus.Rejected(err))
		return c, false
	}
	return c, true
}

// checkAttempt checks what of a submitted attempt depends on its caller:
// its events go to the caller's own inbox, and the host it calls back is
// its tenant's own (a gateway's hostId is its gatewayId, and a delegate's
// is the gateway it is bound to), so that no tenant's attempt reaches
// another's inbox or runs another's tools.
func (c caller) checkAttempt(a *bus.Attempt) error {
	if a.ReplyTo != "" && !c.allows(a.ReplyTo) {
		return teamster.Errorf(teamster.CodeInvalidRequest, "replyTo is not under the submitter's own inbox %s.", c.inbox())
	}
	if c.tenant != "" && a.HostID != "" && a.HostID != c.tenant {
		return teamster.Errorf(teamster.CodeInvalidRequest, "hostId %q is not the submitting gateway's (%q): a gateway's attempts call back only its own host", a.HostID, c.tenant)
	}
	return nil
}
