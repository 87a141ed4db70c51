package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/leases"
)

// controlSubs are the worker's subscriptions to its control subject, the
// revoke broadcast and its harnesses' reset subjects.
type controlSubs struct {
	mu   sync.Mutex
	subs []*nats.Subscription
}

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
	w.control.mu.Lock()
	w.control.subs = subs
	w.control.mu.Unlock()
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
	w.control.mu.Lock()
	subs := w.control.subs
	w.control.subs = nil
	w.control.mu.Unlock()
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
		if err := w.resume(); err != nil {
			w.respond(m, &bus.WorkerControlReply{V: bus.Version, Status: bus.StatusRejected, State: w.state().String(),
				Error: teamster.AsError(err), Attempts: []string{}})
			return
		}
	}
	running := w.runs.ids()
	state := w.state().String()
	if req.Op == bus.ControlDrain && state == bus.WorkerActive {
		state = bus.WorkerDraining
	}
	w.respond(m, &bus.WorkerControlReply{V: bus.Version, Status: bus.StatusOK, State: state, Running: len(running), Attempts: running})
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
