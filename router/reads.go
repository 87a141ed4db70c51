package router

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

// A gateway's reads. Gateways have no JetStream API of their own (NATS
// checks no permission on a request's reply subject, and JetStream stores
// its answer wherever a stream captures that subject), so the routers read
// for them, and answer only inside the sender's inbox (admit).

// onGetResult serves teamster.get.result: the caller's attempt's durable
// result, read by the router's direct get of the caller's own result
// subject. An attempt of another tenant is, to the caller, one without a
// result.
func (r *Router) onGetResult(m *nats.Msg, c caller) {
	var req bus.ResultRequest
	if err := bus.Decode(m.Data, &req); err != nil {
		r.reply(m, &bus.ResultReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	body, err := bus.GetResultBody(ctx, r.js, c.scope(req.AttemptID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		r.reply(m, &bus.ResultReply{V: bus.Version, Status: bus.StatusOK})
	case err != nil:
		r.log.WithFields(c.fields(logrus.Fields{"attempt": req.AttemptID})).Warn("result read failed: " + err.Error())
		r.reply(m, &bus.ResultReply{V: bus.Version, Status: bus.StatusRejected,
			Error: teamster.Errorf(teamster.CodeInternal, "the fleet could not read the result")})
	default:
		r.reply(m, &bus.ResultReply{V: bus.Version, Status: bus.StatusOK, Result: body})
	}
}

// onGetHarnesses serves teamster.get.harnesses: the manifests live workers
// advertise, which a gateway's harness plugin consults to say whether the
// fleet supports a route.
func (r *Router) onGetHarnesses(m *nats.Msg, _ caller) {
	var req bus.HarnessesRequest
	if err := bus.Decode(m.Data, &req); err != nil {
		r.reply(m, &bus.HarnessesReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err)})
		return
	}
	hs := r.registry.manifests()
	if hs == nil {
		hs = []selection.Manifest{}
	}
	r.reply(m, &bus.HarnessesReply{V: bus.Version, Status: bus.StatusOK, Harnesses: hs})
}
