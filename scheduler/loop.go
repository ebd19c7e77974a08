package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/wallwake"
	"github.com/bext-dev/bext-scheduler/locking"
)

// releaseTimeout bounds one release after a run or at shutdown.
const releaseTimeout = 5 * time.Second

// maxSleep bounds how long the loop sleeps on its timer before it reads
// the wall clock again: a timer counts monotonic time, so after a host
// suspend or a clock step it would fire late by that much. On Linux with
// the real clock the kernel wakes the loop at the wall time instead
// (wake_linux.go), and the timer is only a safety net, at wallSafetySleep.
const maxSleep = 2 * time.Second

// wallSafetySleep bounds the sleep when the kernel wakes the loop at the
// head's wall time: should that wake ever be missed, a tick is at most
// this late.
const wallSafetySleep = time.Minute

// Run fires the schedules until ctx ends, then stops gracefully: no new
// ticks fire, ticks waiting on their jitter start at once (their mark is
// raised: no other node will run them), jobs already running get
// ShutdownGrace to finish before their contexts are cancelled, and every
// lock is released with a fresh context. At start it creates the marks of
// schedules never loaded before and tries once each schedule's latest
// missed tick within its catch-up window (catchup.go). Run returns nil
// once none of its goroutines remain. It may be called once.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return ErrRunning
	}
	s.started = true
	s.stopCh = make(chan struct{})
	// Jobs and lock operations outlive ctx by the grace period, so they
	// get a context of their own that only the end of the grace cancels.
	s.jobCtx, s.cancelJobs = context.WithCancelCause(context.WithoutCancel(ctx))
	s.runBase = context.WithoutCancel(s.jobCtx)
	now := s.clock.Now()
	if cap(s.heap) == 0 {
		// One slot per schedule from the start: grown by append, it would
		// carry up to a quarter of its slots unused.
		s.heap = make(eventHeap, 0, len(s.states))
	}
	notes := make([]nextNote, 0, len(s.states))
	for _, st := range s.states {
		if !st.removed {
			notes = append(notes, s.scheduleLocked(st, now))
		}
	}
	s.mu.Unlock()
	for _, n := range notes {
		s.obs.NextTick(n.id, n.next)
	}
	notes = nil

	stopWatch := s.startWatch()
	rec := s.startRecovery(ctx)
	s.loop(ctx)
	rec.wait()
	s.shutdown()
	stopWatch()
	return nil
}

// nextNote is a NextTick report, made under the lock and sent after it.
type nextNote struct {
	id   string
	next time.Time
}

// action is what the loop decided for one due event; dispatch carries it
// out after the lock is released.
type action struct {
	t *tick // the tick fired (newTickLocked); nil when skipped or waiting
	// st's tick at, lateness late, when skipped (still_running: reported,
	// not run) or waiting.
	st       *schedState
	at       time.Time
	lateness time.Duration
	skip     SkipReason
	skipDef  *compiled // st's definition when skipped (st.def is read under s.mu)
	// wait: the tick waits for its schedule's runs here to give their
	// lock back, and is then asked for (retryWaitingLocked): not reported yet.
	wait bool
	next nextNote
}

// loop is the firing loop: one timer, always armed to the heap's head.
// Each wake pops what is due, in time order, and queues every tick for the
// workers (internal/workpool), which never let one tick wait for another: a slow
// lock backend never delays another schedule.
func (s *Scheduler) loop(ctx context.Context) {
	var timer Timer
	ww, err := newWallWake(s.clock)
	if err != nil {
		s.log.Warn("no wall-clock wake: re-reading the clock every "+maxSleep.String(), slog.Any("error", err))
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if ww != nil {
			ww.Close()
		}
	}()
	var acts []action
	// burst: the pool defers the ends of runs (pool.burst) while the loop
	// hands out a burst larger than one batch: its ticks not handed out
	// yet have not started either.
	burst := false
	defer func() {
		if burst {
			s.work.HandingOut(false)
		}
	}()
	for ctx.Err() == nil {
		s.mu.Lock()
		acts = s.popDueLocked(s.clock.Now(), acts[:0])
		s.mu.Unlock()
		if len(acts) == popBatch && !burst {
			burst = true
			s.work.HandingOut(true)
		}
		s.dispatch(acts)
		clear(acts)

		// The timer's duration comes from a fresh reading of the clock: one
		// computed from the reading above could be stale and fire late.
		s.mu.Lock()
		now := s.clock.Now().UnixNano()
		h := s.heap.head()
		if h != nil && h.at <= now {
			s.mu.Unlock()
			continue
		}
		var fire <-chan time.Time
		var wallFire <-chan struct{}
		s.wakeAt = math.MaxInt64
		if h != nil {
			d := min(time.Duration(h.at-now), maxSleep)
			s.wakeAt = now + int64(d)
			if ww != nil {
				// The kernel wakes the loop at h.at; the timer only
				// backs it up, far enough out never to add a wake.
				if err := ww.Arm(h.at); err == nil {
					s.wakeAt = now + int64(min(time.Duration(h.at-now), wallSafetySleep))
					d = wallSafetySleep
					wallFire = ww.C()
				} else {
					ww = s.dropWallWake(ww, err)
				}
			}
			if timer == nil {
				timer = s.clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			fire = timer.C()
		} else {
			if timer != nil {
				timer.Stop()
			}
			if ww != nil {
				if err := ww.Disarm(); err != nil {
					ww = s.dropWallWake(ww, err)
				}
			}
		}
		s.parked = true
		s.notifyLocked()
		s.mu.Unlock()
		if burst {
			burst = false
			s.work.HandingOut(false)
		}

		select {
		case <-ctx.Done():
		case <-fire:
		case <-wallFire:
			if err := ww.Failed(); err != nil {
				ww = s.dropWallWake(ww, err)
			}
		case <-s.wake:
		}
		s.mu.Lock()
		s.parked, s.wakePending = false, false
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
}

// dropWallWake closes a kernel wake that failed and returns nil: the loop
// goes back to re-reading the clock every maxSleep.
func (s *Scheduler) dropWallWake(ww *wallwake.Wake, err error) *wallwake.Wake {
	s.log.Warn("wall-clock wake failed: re-reading the clock every "+maxSleep.String(), slog.Any("error", err))
	ww.Close()
	return nil
}

// popBatch bounds how many events the loop pops before it hands them out:
// with thousands due at once, the first ticks start while the loop pops the
// rest, and the lock the ticks' goroutines need to finish is never burst
// for long.
const popBatch = 64

// popDueLocked pops events due at now, at most popBatch, and decides what
// each means. For a schedule whose clock jumped past several of its ticks,
// only the latest due tick fires (no burst of catch-up runs); its lateness
// says by how much the others were missed.
func (s *Scheduler) popDueLocked(now time.Time, acts []action) []action {
	for len(acts) < popBatch {
		e := s.heap.head()
		if e == nil || e.at > now.UnixNano() {
			return acts
		}
		st := e.st
		spec := st.def.Spec
		at := st.next(now.Location())
		next := spec.Next(at)
		for !next.IsZero() && !next.After(now) {
			at, next = next, spec.Next(next)
		}
		if next.IsZero() {
			s.heap.remove(e)
		} else {
			e.at = next.UnixNano()
			s.heap.fix(e)
		}
		a := action{st: st, at: at, lateness: now.Sub(at), next: nextNote{st.id, next}}
		switch {
		case st.active > 0 && st.def.Overlap == OverlapSkip && st.def.lock && st.releasing.Load() == st.active:
			// Each run of it here has returned and is giving its lock
			// back (a release on its way): the tick is not this node's
			// to skip, and every other node is told contended while the
			// lock is burst, which raises no mark. It is asked for once
			// the lock is given back, and reported then.
			a.wait, st.waiting = true, true
		case st.active > 0 && st.def.Overlap == OverlapSkip:
			a.skip, a.skipDef = SkipStillRunning, st.def
			st.last.tick, st.last.skip = unixOrZero(at), indexOf(skipReasons[:], SkipStillRunning)
		case st.active > 0 && st.def.waits() && st.queue != nil:
			// A tick of it waits for its run already (queue.go).
			a.skip, a.skipDef = SkipStillRunning, st.def
			st.last.tick, st.last.skip = unixOrZero(at), indexOf(skipReasons[:], SkipStillRunning)
		default:
			a.t = s.newTickLocked(st, at, now, false)
			a.t.winSet, a.t.win = true, windowAfter(st.def, at, next)
			if st.active > 1 && st.def.waits() {
				// Its run is in progress here: this tick takes the
				// waiting place at once, so that the next one, due
				// before this one is answered, skips (queue.go).
				st.queue = a.t
			}
		}
		acts = append(acts, a)
	}
	return acts
}

// dispatch reports and starts what popDueLocked decided.
func (s *Scheduler) dispatch(acts []action) {
	if len(acts) == 0 {
		return
	}
	b := s.newBurst(acts)
	ts := s.fired[:0]
	for i := range acts {
		a := &acts[i]
		s.obs.NextTick(a.next.id, a.next.next)
		if a.wait {
			continue
		}
		s.obs.TickFired(a.st.id, a.at, a.lateness)
		if a.skip != "" {
			s.reportSkipAt(a.st.id, a.at, a.skip, 0)
			s.recordSkipOf(a.skipDef, a.at, RecordOverlap) // still_running, the one skip decided here
			continue
		}
		if a.t.def.lock {
			a.t.burst = b
		}
		ts = append(ts, a.t)
	}
	all := ts
	ts = s.handOffTasks(ts)
	s.work.SubmitAll(ts)
	// All of the buffer: the ticks the handoff ended or left waiting are
	// past ts's end, and would stay reachable from it until overwritten.
	clear(all)
	s.fired = all[:0]
}

// endJobs ends the shutdown grace: the jobs still running are cancelled
// (errShutdown, read as cancelled), and so is any that starts from now on.
func (s *Scheduler) endJobs() {
	s.cancelJobs(errShutdown)
	s.runs.cancelAll()
}

// burst is the deadline of the lock requests of ticks the loop handed out
// together: a TryLock answered after the lease it asked for would be
// worthless, so each is bounded by its TTL. One context for the whole batch
// (bounded by the shortest TTL in it) instead of one per tick: when
// thousands of ticks fire at once, a timer and a context each were a fifth
// of their cost.
type burst struct {
	ctx    context.Context
	cancel context.CancelFunc
	left   atomic.Int32 // ticks that have not yet taken their lock
}

// newBurst returns the burst of the locked ticks among acts, nil if none.
func (s *Scheduler) newBurst(acts []action) *burst {
	n, ttl := 0, time.Duration(0)
	for i := range acts {
		a := &acts[i]
		if a.t != nil && a.t.def.lock {
			n++
			if ttl == 0 || a.t.def.ttl < ttl {
				ttl = a.t.def.ttl
			}
		}
	}
	if n == 0 {
		return nil
	}
	b := &burst{}
	b.ctx, b.cancel = context.WithTimeout(s.jobCtx, ttl)
	b.left.Store(int32(n))
	return b
}

// context is the context that bounds the first try-lock-tick of a tick
// of b: Background for a tick of none (a node-local or manual tick never
// asks).
func (b *burst) context() context.Context {
	if b == nil {
		return context.Background()
	}
	return b.ctx
}

// done is called once by each tick of b when it no longer needs b.ctx
// (letGo).
func (b *burst) done() {
	if b.left.Add(-1) == 0 {
		b.cancel()
	}
}

// scheduleLocked computes st's next tick after now and files it in the heap.
func (s *Scheduler) scheduleLocked(st *schedState, now time.Time) nextNote {
	var next time.Time
	if !st.def.Elsewhere { // targeted at other nodes: never fires here
		next = st.def.Spec.Next(now)
	}
	switch {
	case next.IsZero():
		if st.fire.index >= 0 {
			s.heap.remove(&st.fire)
		}
	case st.fire.index >= 0:
		st.fire.at = next.UnixNano()
		s.heap.fix(&st.fire)
	default:
		st.fire.at = next.UnixNano()
		s.heap.push(&st.fire)
	}
	return nextNote{st.id, next}
}

// pokeLocked wakes the loop so it re-arms its timer to a changed heap
// head. The flag stays set until the loop has taken the wake under the
// lock: in between, the loop is neither parked nor busy by any other
// measure, and WaitIdle must not call it idle there (a test would then
// move its clock while the loop re-arms its timer from a stale reading).
func (s *Scheduler) pokeLocked() {
	s.wakePending = true
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// shutdown runs after the loop stopped: it gives running jobs the grace,
// then cancels them and waits for every goroutine. Each tick releases its
// own lock when its run ends (step 7), so nothing is left to release here.
func (s *Scheduler) shutdown() {
	close(s.stopCh)
	s.stopWaiting()   // the ticks waiting for their turn ask now
	s.wakeAllQueued() // the ticks waiting for their schedule's run end now
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	grace := s.clock.NewTimer(s.opts.ShutdownGrace)
	s.mu.Lock()
	running := s.inflight
	s.mu.Unlock()
	s.log.Info("shutting down", slog.Int("in_flight", running), slog.Duration("grace", s.opts.ShutdownGrace))
	select {
	case <-done:
	case <-grace.C():
		s.log.Warn("shutdown grace ran out: cancelling running jobs",
			slog.Duration("grace", s.opts.ShutdownGrace))
		s.endJobs()
		<-done
	case <-s.endGrace:
		s.log.Warn("shutdown grace ended early: cancelling running jobs")
		s.endJobs()
		<-done
	}
	grace.Stop()
	s.endJobs()
	s.work.Close() // every tick has finished: only parked workers are left
	if r := s.relCtx.Swap(nil); r != nil {
		r.cancel() // no release is in flight any more
	}

	s.mu.Lock()
	for _, st := range s.states {
		s.forgetIfDoneLocked(st)
	}
	s.mu.Unlock()
}

// EndGrace ends the shutdown grace at once (an operator's second ^C):
// running jobs are cancelled as if it had run out (result cancelled), and
// Run returns once they have ended and released their locks. Called before
// the shutdown, it takes effect when the shutdown begins. Safe to call
// more than once, from any goroutine.
func (s *Scheduler) EndGrace() { s.endGraceOnce.Do(func() { close(s.endGrace) }) }

// release gives h back with a fresh context: the one that got here may be
// cancelled already (shutdown), and a lock must still be released then.
func (s *Scheduler) release(id string, h *locking.Handle, why string) {
	s.logRelease(id, h, why, s.releaseLock(s.releaseCtx(), h))
}

// logRelease logs the outcome of h's release.
func (s *Scheduler) logRelease(id string, h *locking.Handle, why string, err error) {
	if err != nil {
		// The lock is not ours any more (expired, or the backend is down
		// and will expire it): nothing to retry, but worth knowing. A lock
		// already lost is expected after a lock_lost run.
		level := slog.LevelWarn
		if errors.Is(err, locking.ErrLockLost) {
			level = slog.LevelInfo
		}
		s.log.Log(context.Background(), level, "releasing lock failed", slog.String("schedule", id),
			slog.Int64("fence", h.Fence()), slog.String("when", why), slog.Any("error", err))
		return
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("lock released", slog.String("schedule", id),
			slog.Int64("fence", h.Fence()), slog.String("when", why))
	}
}

// releaseCtx returns a context that bounds one release to at least
// releaseTimeout: one context, and its timer, serves every release of
// about a second (a context and a timer per release were a tenth of a
// burst's cost). Not cancelled by the shutdown, like jobCtx's values-only
// parent: a lock must still be released then.
func (s *Scheduler) releaseCtx() context.Context {
	now := time.Now() // a context deadline is on the real clock
	if r := s.relCtx.Load(); r != nil && r.deadline.Sub(now) >= releaseTimeout {
		return r.ctx
	}
	r := &sharedDeadline{deadline: now.Add(releaseTimeout + releaseReuse)}
	r.ctx, r.cancel = context.WithDeadline(context.WithoutCancel(s.jobCtx), r.deadline)
	// Releases still using the one replaced keep it until its deadline,
	// when its own timer ends it.
	s.relCtx.Store(r)
	return r.ctx
}

// releaseReuse is how long one release context is handed out.
const releaseReuse = time.Second

// sharedDeadline is a context with a deadline that several operations use.
type sharedDeadline struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

// notifyLocked wakes WaitIdle callers (tests) to re-check their condition.
func (s *Scheduler) notifyLocked() {
	s.idleWanted.Store(false)
	if s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// waitIdle waits until the loop has handled every event due by the
// scheduler's clock and no tick or release task is in flight. Tests
// (through export_test.go) use it to step a fake clock deterministically.
func (s *Scheduler) waitIdle(ctx context.Context) error { return s.waitUntil(ctx, s.idleLocked) }

// waitUntil waits until cond, called under s.mu, holds; it re-checks
// whenever the loop parks or a task finishes (notifyLocked).
func (s *Scheduler) waitUntil(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		// Set before cond is read: what changes cond without s.mu (a
		// handoff waiter) notifies after it changed it if it sees this.
		s.idleWanted.Store(true)
		if cond() {
			s.mu.Unlock()
			return nil
		}
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		ch := s.idle
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Scheduler) idleLocked() bool {
	if s.inflight > 0 || !s.parked || s.wakePending {
		return false
	}
	// Parked, but the timer may have come due (maxSleep) without the loop
	// having woken yet: not idle until it has re-armed.
	now := s.clock.Now().UnixNano()
	h := s.heap.head()
	return (h == nil || h.at > now) && s.wakeAt > now
}
