package scheduler

import "time"

// What the mutations of package internal/mutation need beyond their one
// line: only ever called under mutation.On, which is constant false
// without the simmut build tag, so the linker leaves this out of the
// production binary.

// mutantHoldRelease holds the release of tick t's lock until its
// schedule's next tick can no longer be caught up (its catch-up window
// and jitter past it, and the clock skew), or the shutdown begins: the
// mutation ReleaseDeferred.
func (s *Scheduler) mutantHoldRelease(t *tick) {
	now := s.clock.Now()
	next := t.def.Spec.Next(now)
	if next.IsZero() {
		return
	}
	wait := s.clock.NewTimer(next.Add(s.window(t.def, next) + t.def.Jitter + s.opts.MaxClockSkew + time.Second).Sub(now))
	defer wait.Stop()
	select {
	case <-wait.C():
	case <-s.stopCh:
	}
}
