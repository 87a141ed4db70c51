package injection

import "sync"

// Settler reports one admitted input's admission and its one settlement.
// Settle may be called any number of times from any goroutine: the first call
// wins and OnQueueSettled fires exactly once. A settlement never overtakes
// the admission: until Accept has returned from OnQueueAccepted, a settlement
// is held and Accept delivers it on its way out. Neither method blocks on the
// other, so a callback may call back into whatever settles the input.
//
// Make the Settler before the input becomes visible to whatever settles it,
// and call Accept once it is queued: a Settler whose Accept is never called
// never reports its settlement. Input refused at admission has no Settler;
// Refuse reports it.
type Settler struct {
	opts QueueOptions

	mu       sync.Mutex
	accepted bool        // Accept has been called
	admitted bool        // OnQueueAccepted has returned
	settled  bool        // a settlement has been chosen
	held     *Settlement // chosen before admitted; Accept delivers it
}

// NewSettler returns the settler of one admitted input.
func NewSettler(opts QueueOptions) *Settler { return &Settler{opts: opts} }

// Accept reports the admission (OnQueueAccepted(true)) once, then delivers a
// settlement chosen meanwhile.
func (s *Settler) Accept() {
	s.mu.Lock()
	if s.accepted {
		s.mu.Unlock()
		return
	}
	s.accepted = true
	s.mu.Unlock()

	if s.opts.OnQueueAccepted != nil {
		s.opts.OnQueueAccepted(true)
	}

	s.mu.Lock()
	s.admitted = true
	held := s.held
	s.held = nil
	s.mu.Unlock()
	if held != nil {
		s.deliver(*held)
	}
}

// Settle chooses the input's settlement and reports whether this call chose
// it. It fires OnQueueSettled now when the admission has been reported, and
// otherwise leaves that to Accept.
func (s *Settler) Settle(st Settlement) bool {
	s.mu.Lock()
	if s.settled {
		s.mu.Unlock()
		return false
	}
	s.settled = true
	if !s.admitted {
		s.held = &st
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	s.deliver(st)
	return true
}

func (s *Settler) deliver(st Settlement) {
	if s.opts.OnQueueSettled != nil {
		s.opts.OnQueueSettled(st)
	}
}

// Refuse settles input refused at admission as Rejected; OnQueueAccepted is
// not called.
func Refuse(opts QueueOptions) {
	if opts.OnQueueSettled != nil {
		opts.OnQueueSettled(Rejected)
	}
}
