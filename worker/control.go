package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/leases"
)

// subscribeControl serves teamster.worker.<workerId>.control: drain, resume,
// status.
func (w *Worker) subscribeControl() error {
	subj, err := bus.WorkerControlSubject(w.id)
	if err != nil {
		return err
	}
	sub, err := w.nc.Subscribe(subj, w.onControl)
	if err != nil {
		return fmt.Errorf("worker: subscribe %s: %w", subj, err)
	}
	subs := []*nats.Subscription{sub}
	// Every worker hears every revoke, to drop its in-flight items at once.
	revoked, err := w.nc.Subscribe(bus.SubjectSourceRevoked, w.onSourceRevoked)
	if err != nil {
		return fmt.Errorf("worker: subscribe %s: %w", bus.SubjectSourceRevoked, err)
	}
	subs = append(subs, revoked)
	// Every worker hosting a harness serves its reset, one of them per call.
	for id, h := range w.harnesses {
		subj, err := bus.HarnessResetSubject(id)
		if err != nil {
			return err
		}
		sub, err := w.nc.QueueSubscribe(subj, bus.ConsumerName(id), func(m *nats.Msg) { w.onHarnessReset(m, id, h) })
		if err != nil {
			return fmt.Errorf("worker: subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	w.mu.Lock()
	w.controlSubs = subs
	w.mu.Unlock()
	return nil
}

// onHarnessReset calls the harness's reset for a session the owner reset or
// deleted; a harness without native state outside the record has nothing to
// do.
func (w *Worker) onHarnessReset(m *nats.Msg, id string, h *hosted) {
	var req bus.HarnessReset
	if err := bus.Decode(m.Data, &req); err != nil {
		w.respond(m, bus.Rejected(err))
		return
	}
	if r, ok := h.impl.(harness.Resetter); ok {
		ctx, cancel := context.WithTimeout(w.runCtx, 5*time.Second)
		defer cancel()
		if err := r.Reset(ctx, req.SessionKey, req.Binding); err != nil {
			w.log.WithFields(logrus.Fields{"harness": id, "session": leases.Tag(req.SessionKey)}).Warn("harness reset failed: " + err.Error())
			w.respond(m, bus.Rejected(teamster.Errorf(teamster.CodeHarnessFailed, "harness %s reset: %v", id, err)))
			return
		}
	}
	w.respond(m, bus.OK())
}

func (w *Worker) unsubscribeControl() {
	w.mu.Lock()
	subs := w.controlSubs
	w.controlSubs = nil
	w.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
}

func (w *Worker) onControl(m *nats.Msg) {
	var req bus.WorkerControl
	if err := bus.Decode(m.Data, &req); err != nil {
		w.respond(m, &bus.WorkerControlReply{V: bus.Version, Status: bus.StatusRejected, Error: teamster.AsError(err), Attempts: []string{}})
		return
	}
	switch req.Op {
	case bus.ControlDrain:
		go func() { _ = w.Drain(w.runCtx) }()
	case bus.ControlResume:
		if err := w.Resume(); err != nil {
			w.respond(m, &bus.WorkerControlReply{V: bus.Version, Status: bus.StatusRejected, State: w.State(),
				Error: teamster.AsError(err), Attempts: []string{}})
			return
		}
	}
	running := w.Running()
	state := w.State()
	if req.Op == bus.ControlDrain && state == bus.WorkerActive {
		state = bus.WorkerDraining
	}
	w.respond(m, &bus.WorkerControlReply{V: bus.Version, Status: bus.StatusOK, State: state, Running: len(running), Attempts: running})
}

// Resume undoes a drain that has not finished: the worker fetches again.
func (w *Worker) Resume() error {
	w.mu.Lock()
	if w.state != bus.WorkerDraining || w.resumeDrain == nil {
		st := w.state
		w.mu.Unlock()
		return teamster.Errorf(teamster.CodeInvalidRequest, "worker %s is %s, not draining", w.id, st)
	}
	close(w.resumeDrain)
	w.resumeDrain = nil
	w.state = bus.WorkerActive
	w.mu.Unlock()
	w.m.SetState(bus.WorkerActive, allStates)
	w.registry.kickNow()
	return nil
}

func (w *Worker) respond(m *nats.Msg, v any) {
	b, err := bus.Encode(v)
	if err != nil {
		w.log.Error(err.Error())
		return
	}
	if err := m.Respond(b); err != nil {
		w.log.Debug("control reply not sent: " + err.Error())
	}
}
