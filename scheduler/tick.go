package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// This file is where a tick is decided: DESIGN.md "A tick's life", steps
// 1 to 8. Step 1 (overlap) is decided by the loop as the tick fires
// (popDueLocked in loop.go), because it needs the schedule's state at that
// instant; everything after it happens here, on the tick's own goroutine
// (a worker of pool.go).

// fired is one tick handed from the loop to its goroutine.
type fired struct {
	st       *schedState
	def      *compiled // the definition the tick fired with (Reload may swap st.def)
	tick     time.Time // T, the scheduled time
	lateness time.Duration
	reuse    *locking.Handle // our lingering lock from the previous tick (claim.go)
	burst    *burst          // bounds its TryLock; set when the tick locks
}

// runTask is what a worker (pool.go) does with a task.
func (s *Scheduler) runTask(t task) {
	if t.release != nil {
		s.endClaim(t.release)
		return
	}
	s.handleTick(t.f)
}

// handleTick carries tick f from step 2 to step 8.
func (s *Scheduler) handleTick(f fired) {
	defer s.wg.Done()

	// Step 2: resolve the hint (done once per schedule by compile).
	if !f.def.lock {
		if s.abandon(f, nil) {
			return
		}
		s.finish(f, s.runJob(f, nil), nil)
		return
	}

	// Steps 3 and 4: take the lock (TTL from compile), or reuse ours.
	h, why := s.acquire(f)
	if h == nil {
		s.reportSkip(f, why, 0)
		s.finish(f, runOutcome{skip: why}, nil)
		return
	}
	// On a backend whose locks die with their holder (Postgres), record
	// the claim of step 7 now, for this tick (a reused lock too): if this
	// node dies before the claim's time, the tick must stay claimed all
	// the same (claim.go).
	if !s.recordClaim(f, h) {
		s.reportSkip(f, SkipBackendError, h.Fence())
		s.finish(f, runOutcome{skip: SkipBackendError}, nil)
		return
	}
	// A lock granted after T + MaxClockSkew may be one another node just
	// released after running T: running would run T twice. Keep the claim
	// anyway, or yet another late node could take T after us.
	if late := s.clock.Now().Sub(f.tick); late > s.opts.MaxClockSkew {
		s.log.Warn("lock granted late: tick not run", slog.String("schedule", f.def.ID),
			slog.String("tick", f.tick.Format(time.RFC3339)), slog.Duration("late", late),
			slog.Int64("fence", h.Fence()))
		s.reportSkip(f, SkipBackendError, h.Fence())
		s.finish(f, runOutcome{skip: SkipBackendError}, h)
		return
	}

	// Step 5: the jitter, spent holding the lock.
	switch s.waitJitter(f, h) {
	case jitterLost:
		s.reportSkip(f, SkipBackendError, h.Fence())
		s.finish(f, runOutcome{skip: SkipBackendError}, nil)
		return
	case jitterStopped:
		s.abandon(f, h)
		return
	}
	if s.abandon(f, h) {
		return
	}

	// Step 6: run, renewing the lock.
	out := s.runJob(f, h)
	// Step 7: keep the tick claimed (claim.go), unless the lock is gone.
	keep := h
	if out.result == ResultLockLost {
		keep = nil
	}
	// Step 8: runJob reported the run; finish records it.
	s.finish(f, out, keep)
}

// acquire takes f's lock: it renews the lingering lock of the previous
// tick when there is one, else calls TryLock. It returns the handle, or
// nil and why the tick is skipped.
func (s *Scheduler) acquire(f fired) (*locking.Handle, SkipReason) {
	defer f.burst.done()
	id, ttl := f.def.ID, f.def.ttl
	if h := f.reuse; h != nil {
		if h.TTL() != ttl { // Reload changed the lease: take one of the new length
			s.release(id, h, "lease changed")
		} else {
			ctx, cancel := context.WithTimeout(s.jobCtx, ttl/3)
			err := s.opts.Locker.Renew(ctx, h)
			cancel()
			if err == nil {
				return h, ""
			}
			s.log.Warn("lingering lock lost: trying to take it afresh", slog.String("schedule", id),
				slog.Int64("fence", h.Fence()), slog.Any("error", err))
		}
	}
	// An answer slower than the TTL would be a lease already over: the
	// burst's deadline is at most the TTL from when the tick was handed out.
	h, err := s.opts.Locker.TryLock(f.burst.ctx, id, ttl)
	switch {
	case err != nil:
		s.log.Warn("try-lock failed: tick not run", slog.String("schedule", id),
			slog.String("tick", f.tick.Format(time.RFC3339)), slog.Any("error", err))
		return nil, SkipBackendError
	case h == nil:
		return nil, SkipContended
	}
	return h, ""
}

type jitterEnd int

const (
	jitterDone    jitterEnd = iota // waited; run now
	jitterLost                     // renewing failed: the lock is gone
	jitterStopped                  // shutdown began: do not run
)

// waitJitter waits a random delay in [0, Jitter) while holding h, renewing
// it when the delay is longer than a third of its TTL.
func (s *Scheduler) waitJitter(f fired, h *locking.Handle) jitterEnd {
	if f.def.Jitter <= 0 {
		return jitterDone
	}
	d := time.Duration(s.opts.Rand(int64(f.def.Jitter)))
	if d <= 0 {
		return jitterDone
	}
	d = min(d, f.def.Jitter-1)
	wait := s.clock.NewTimer(d)
	defer wait.Stop()
	every := h.TTL() / 3
	var renewC <-chan time.Time
	if d > every {
		r := s.clock.NewTimer(every)
		defer r.Stop()
		renewC = r.C()
		for {
			select {
			case <-wait.C():
				return jitterDone
			case <-s.stopCh:
				return jitterStopped
			case <-renewC:
				r.Reset(every) // before renewing, as in runJob
				if err := s.renew(h, every); err != nil {
					s.log.Error("lock lost during jitter: tick not run", slog.String("schedule", f.def.ID),
						slog.String("tick", f.tick.Format(time.RFC3339)), slog.Int64("fence", h.Fence()),
						slog.Any("error", err))
					return jitterLost
				}
			}
		}
	}
	select {
	case <-wait.C():
		return jitterDone
	case <-s.stopCh:
		return jitterStopped
	}
}

// renew extends h, bounded by timeout.
func (s *Scheduler) renew(h *locking.Handle, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(s.jobCtx, timeout)
	defer cancel()
	return s.opts.Locker.Renew(ctx, h)
}

// abandon reports whether shutdown began before f's job started; if so it
// drops the tick (logged, lock released) and finishes it.
func (s *Scheduler) abandon(f fired, h *locking.Handle) bool {
	select {
	case <-s.stopCh:
	default:
		return false
	}
	s.log.Info("shutting down: tick abandoned before its run", slog.String("schedule", f.def.ID),
		slog.String("tick", f.tick.Format(time.RFC3339)))
	if h != nil {
		s.release(f.def.ID, h, "tick abandoned")
	}
	s.finish(f, runOutcome{abandoned: true}, nil)
	return true
}

// finish ends a tick: it keeps h as the tick's lingering lock (or
// releases it when the claim is not kept) and records the outcome.
func (s *Scheduler) finish(f fired, out runOutcome, h *locking.Handle) {
	var c *claim
	if h != nil {
		c = &claim{h: h, tick: f.tick} // allocated before the lock: the loop waits on it
	}
	s.mu.Lock()
	if c != nil && !s.keepClaimLocked(f.st, c) {
		s.mu.Unlock()
		s.release(f.def.ID, h, "after the run")
		s.mu.Lock()
	}
	st := f.st
	if !out.abandoned {
		st.last.tick, st.last.skip = f.tick, out.skip
		if out.skip == "" {
			st.last.result, st.last.runStart, st.last.runDur = out.result, out.start, out.dur
		}
	}
	st.active--
	s.inflight--
	s.forgetIfDoneLocked(st)
	s.notifyLocked()
	s.mu.Unlock()
}

// reportSkip is step 8 for a tick that did not run: the observer, and one
// log line whose level says how much an operator should care.
func (s *Scheduler) reportSkip(f fired, why SkipReason, fence int64) {
	s.obs.TickSkipped(f.st.id, f.tick, why)
	level := slog.LevelInfo
	switch why {
	case SkipContended:
		level = slog.LevelDebug
	case SkipBackendError:
		level = slog.LevelWarn
	}
	if !s.log.Enabled(context.Background(), level) {
		return // formatting the line costs more than the rest of a tick
	}
	s.log.LogAttrs(context.Background(), level, "tick skipped",
		slog.String("schedule", f.st.id), slog.String("tick", f.tick.Format(time.RFC3339)),
		slog.String("outcome", string(why)), slog.Duration("duration", 0), slog.Int64("fence", fence))
}

// reportRun is step 8 for a tick that ran.
func (s *Scheduler) reportRun(f fired, out runOutcome, fence int64) {
	s.obs.RunFinished(f.st.id, f.tick, out.result, out.dur, out.overrun)
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("schedule", f.st.id), slog.String("tick", f.tick.Format(time.RFC3339)),
		slog.String("outcome", string(out.result)), slog.Duration("duration", out.dur),
		slog.Int64("fence", fence), slog.Bool("overrun", out.overrun),
	}
	if out.err != nil {
		attrs = append(attrs, slog.Any("error", out.err))
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "tick ran", attrs...)
}
