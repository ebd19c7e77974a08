package scheduler

// HeldBack is the number of handoff waiters deferred (deferToBurstLocked)
// whose wait has not ended.
func (s *Scheduler) HeldBack() int {
	h := s.hand
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.asking {
		for _, w := range a.deferred {
			if !w.done {
				n++
			}
		}
	}
	return n
}
