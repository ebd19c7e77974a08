package scheduler

import (
	"sync"
	"time"
)

// DeferRunEnds makes the pool defer the ends of runs (pool.later) as a
// burst that never drains would: a try-lock-tick counts as on its way and
// the bound maxDefer never passes, until the returned func is called. On a
// fake clock the real milliseconds of that bound have no measure: a test
// may step the clock past the next tick within them.
func (s *Scheduler) DeferRunEnds() (undo func()) {
	p := s.work
	p.mu.Lock()
	frozen, now := p.now(), p.now
	p.now = func() time.Duration { return frozen }
	p.asking.Add(1)
	p.mu.Unlock()
	return sync.OnceFunc(func() {
		p.mu.Lock()
		p.now = now
		p.asking.Add(-1)
		if p.waitingLocked() && p.spinning == 0 && !p.closed {
			p.spinLocked()
		}
		p.mu.Unlock()
	})
}
