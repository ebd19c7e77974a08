package scheduler

import "time"

// What the mutations of package internal/mutation need beyond their one
// line: only ever called under mutation.On, which is constant false
// without the simmut build tag, so the linker leaves this out of the
// production binary.

// mutantHoldRelease holds the release of tick f's lock until its
// schedule's next tick can no longer be caught up (its catch-up window
// and jitter past it, and the clock skew), or the shutdown begins: the
// mutation ReleaseDeferred.
func (s *Scheduler) mutantHoldRelease(f fired) {
	now := s.clock.Now()
	next := f.def.Spec.Next(now)
	if next.IsZero() {
		return
	}
	t := s.clock.NewTimer(next.Add(s.window(f.def, next) + f.def.Jitter + s.opts.MaxClockSkew + time.Second).Sub(now))
	defer t.Stop()
	select {
	case <-t.C():
	case <-s.stopCh:
	}
}
