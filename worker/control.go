package worker

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
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
	w.mu.Lock()
	w.controlSub = sub
	w.mu.Unlock()
	return nil
}

func (w *Worker) unsubscribeControl() {
	w.mu.Lock()
	sub := w.controlSub
	w.controlSub = nil
	w.mu.Unlock()
	if sub != nil {
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
	w.mu.Unlock()
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
