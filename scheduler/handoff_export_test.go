package scheduler

import "context"

// WaitSettled is WaitIdle for a scheduler with a handoff: it waits until
// every tick in flight is waiting for its turn on a timer not yet due, so
// the test can move the clock on.
func (s *Scheduler) WaitSettled(ctx context.Context) error { return s.waitUntil(ctx, s.settledLocked) }

// WaitListening waits until the handoff listens to raised marks.
func (s *Scheduler) WaitListening(ctx context.Context) error {
	return s.waitUntil(ctx, func() bool {
		s.hand.mu.Lock()
		defer s.hand.mu.Unlock()
		return s.hand.listening
	})
}

// HeardKeys reports the keys whose raised marks the handoff keeps.
func (s *Scheduler) HeardKeys() []string {
	s.hand.mu.Lock()
	defer s.hand.mu.Unlock()
	keys := make([]string, 0, len(s.hand.heard))
	for k := range s.hand.heard {
		keys = append(keys, k)
	}
	return keys
}

// Releasing is how many runs of schedule id this node counts as giving
// their lock back (schedState.releasing).
func (s *Scheduler) Releasing(id string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[id].releasing.Load()
}
