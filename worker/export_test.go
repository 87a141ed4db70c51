package worker

// SetAfterMark makes f run in every run of w after its result was marked
// published and before its result event is sent: the window in which a
// worker that dies has published its result but not told its submitter.
func SetAfterMark(w *Worker, f func(attemptID string)) {
	h := w.hookCopy()
	h.afterMark = f
	w.hooks.Store(h)
}

// SetBeforeDrainWait makes f run in w's drains after fetching stopped,
// before the drain waits for its runs, a resume or its timeout.
func SetBeforeDrainWait(w *Worker, f func()) {
	h := w.hookCopy()
	h.beforeDrainWait = f
	w.hooks.Store(h)
}

func (w *Worker) hookCopy() *testHooks {
	if h := w.hooks.Load(); h != nil {
		c := *h
		return &c
	}
	return &testHooks{}
}

// Resume undoes a drain of w, as the resume control op does.
func Resume(w *Worker) error { return w.resume() }

// State is w's lifecycle state as the fleet sees it.
func State(w *Worker) string { return w.state().String() }
