package scheduler

// DeferRunEnds makes the pool defer the ends of runs (pool.later) as a
// burst that never drains would: a try-lock-tick counts as on its way and
// the bound maxDefer never passes, until the returned func is called. On a
// fake clock the real milliseconds of that bound have no measure: a test
// may step the clock past the next tick within them.
func (s *Scheduler) DeferRunEnds() (undo func()) { return s.work.HoldLater() }
