package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// Catch-up (DESIGN.md "Catch-up"): when a node starts, or its backend
// comes back after an outage, the most recent tick of each locked schedule
// that was due within its catch-up window and that this node has not seen
// decided is tried once, late. So is that of a schedule whose definition a
// Reload changed (reload.go), and that of a schedule whose tick fired here
// while its previous run was giving its lock back (release.go). The tick mark makes the race between nodes
// harmless: one of them is granted, the others are told "done". Older
// missed ticks are never replayed, and a schedule whose next tick is due
// before a late run would end (within expected_runtime) is left to that
// tick, unless the missed one is within max_clock_skew of now (on time).
//
// Marks: a schedule never runs a tick from before it was first loaded by
// any node, because the first node to load it creates its mark at the
// backend's time (InitMarks) before anything is caught up. Schedules whose
// marks could not be created (backend down at start) are retried with the
// outage's probes.

// startTimeout bounds the marks and catch-up made before the loop starts:
// a backend that does not answer must not hold back node-local ticks.
const startTimeout = 2 * time.Second

// probeEvery is how often a node whose backend failed asks it again, so
// that a weekly job missed during an outage runs soon after the backend
// returns, not at its next tick.
const probeEvery = time.Second

// backendState tracks outages of the lock backend on this node.
type backendState struct {
	down    atomic.Bool  // a call failed and none succeeded since
	skipped atomic.Int64 // ticks skipped as backend_error in this outage
	poke    chan struct{}

	mu       sync.Mutex
	unmarked []string // locked schedules whose marks are not yet created

	// probeArmed (under the Scheduler's mu) is true while the recovery
	// goroutine waits with its probe timer armed: a test moving a fake
	// clock waits for it, or its move could land before the timer is armed
	// and never fire it.
	probeArmed bool
}

// backendFailed records that tick's try-lock-tick of st failed, and the
// tick is skipped.
func (s *Scheduler) backendFailed(st *schedState, tick time.Time, err error) {
	s.backendDown(st, tick, err, s.backend.skipped.Add(1))
}

// backendDown records that tick's try-lock-tick of st got no answer (err),
// n ticks skipped so far in this outage: the outage begins, and its probe
// runs, while the tick's request is still being resent (resend.go). The
// first failure of an outage is logged as a warning; the others at debug,
// so an outage costs one line per node, not one per tick.
func (s *Scheduler) backendDown(st *schedState, tick time.Time, err error, n int64) {
	s.mu.Lock()
	st.owed = true
	s.mu.Unlock()
	if s.backend.down.CompareAndSwap(false, true) {
		s.log.Warn("lock backend failed: locked ticks are skipped until it answers again",
			slog.String("schedule", st.id), slog.String("tick", tick.Format(time.RFC3339)), slog.Any("error", err))
		select {
		case s.backend.poke <- struct{}{}:
		default:
		}
		return
	}
	if n%1000 == 0 || s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("try-lock-tick failed", slog.String("schedule", st.id),
			slog.String("tick", tick.Format(time.RFC3339)), slog.Any("error", err))
	}
}

// backendAnswered records a successful try-lock-tick; the first one after
// an outage starts the catch-up of the schedules it made skip.
func (s *Scheduler) backendAnswered() {
	if !s.backend.down.Load() || !s.backend.down.CompareAndSwap(true, false) {
		return
	}
	s.recovered()
}

// recovered logs the end of an outage and catches up what it made skip.
// The line comes once the catch-up is handed out, so whoever reads it
// (an operator, a test waiting for idle) finds the caught-up ticks under
// way, not yet to come.
func (s *Scheduler) recovered() {
	skipped := s.backend.skipped.Swap(0)
	s.catchUp(s.clock.Now(), func(st *schedState) bool { return st.owed })
	s.log.Info("lock backend answers again", slog.Int64("ticks_skipped", skipped))
}

// initMarks creates the marks of the schedules not yet marked. With probe
// set it also asks for the marks of the schedules an outage made skip,
// which changes nothing (they exist) but is a real round trip: the probe
// that tells a failed backend is back. It reports whether the backend
// answered.
func (s *Scheduler) initMarks(ctx context.Context, probe bool) bool {
	s.backend.mu.Lock()
	keys := s.backend.unmarked
	s.backend.mu.Unlock()
	n := len(keys)
	if probe {
		keys = append(keys[:n:n], s.owedKeys()...)
	}
	if len(keys) == 0 {
		return true
	}
	if err := s.opts.Locker.InitMarks(ctx, keys); err != nil {
		if s.backend.down.CompareAndSwap(false, true) {
			s.log.Warn("lock backend failed: could not create the tick marks of new schedules; retrying",
				slog.Int("schedules", len(keys)), slog.Any("error", err))
		}
		return false
	}
	s.backend.mu.Lock()
	// Reload may have appended meanwhile: keep what came after.
	s.backend.unmarked = append(s.backend.unmarked[:0:0], s.backend.unmarked[n:]...)
	s.backend.mu.Unlock()
	return true
}

// owedKeys returns the ids of the schedules an outage made skip.
func (s *Scheduler) owedKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, st := range s.states {
		if st.owed && !st.removed && st.def.lock {
			ids = append(ids, id)
		}
	}
	return ids
}

// markLater files the ids of locked schedules for InitMarks.
func (s *Scheduler) markLater(defs []*compiled) {
	s.backend.mu.Lock()
	for _, c := range defs {
		if c.lock {
			s.backend.unmarked = append(s.backend.unmarked, c.ID)
		}
	}
	s.backend.mu.Unlock()
}

// recovery is the goroutine that probes the backend during an outage.
type recovery struct {
	stop func()
	done chan struct{}
}

func (r recovery) wait() {
	if r.stop != nil {
		r.stop()
		<-r.done
	}
}

// startRecovery creates the marks and catches up once, before the loop
// starts (bounded by startTimeout), then starts the goroutine that probes
// a failed backend every probeEvery until it answers, catches up what the
// outage made skip, and creates the marks of schedules Reload added.
func (s *Scheduler) startRecovery(runCtx context.Context) recovery {
	if s.opts.Locker == nil {
		return recovery{}
	}
	ctx, cancel := context.WithTimeout(s.jobCtx, startTimeout)
	ok := s.initMarks(ctx, false)
	cancel()
	if ok {
		// Stops early when Run's ctx ends (a SIGTERM while it runs): finding
		// the latest tick of 100,000 schedules takes seconds of CPU, and
		// a stopping node tries none of them anyway.
		s.catchUp(s.clock.Now(), func(*schedState) bool { return runCtx.Err() == nil })
	} else {
		s.mu.Lock()
		for _, st := range s.states {
			st.owed = true
		}
		s.mu.Unlock()
	}
	stop := make(chan struct{})
	r := recovery{done: make(chan struct{})}
	r.stop = sync.OnceFunc(func() { close(stop) })
	go func() {
		defer close(r.done)
		var retry Timer
		defer func() {
			if retry != nil {
				retry.Stop()
			}
		}()
		for {
			var retryC <-chan time.Time
			if s.backend.down.Load() || s.hasUnmarked() {
				if retry == nil {
					retry = s.clock.NewTimer(probeEvery)
				} else {
					retry.Reset(probeEvery)
				}
				retryC = retry.C()
			}
			s.setProbeArmed(retryC != nil)
			select {
			case <-stop:
				return
			case <-s.backend.poke:
			case <-retryC:
			}
			s.setProbeArmed(false)
			ctx, cancel := context.WithTimeout(s.jobCtx, startTimeout)
			ok := s.initMarks(ctx, s.backend.down.Load())
			cancel()
			if ok && s.backend.down.CompareAndSwap(true, false) {
				s.recovered()
			}
		}
	}()
	return r
}

func (s *Scheduler) setProbeArmed(armed bool) {
	s.mu.Lock()
	s.backend.probeArmed = armed
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Scheduler) hasUnmarked() bool {
	s.backend.mu.Lock()
	defer s.backend.mu.Unlock()
	return len(s.backend.unmarked) > 0
}

// catchUp tries once, late, the latest tick within its window of each
// locked schedule chosen by which, unless this node saw it decided, it
// still runs the schedule, or its next tick comes before a late run would
// end.
func (s *Scheduler) catchUp(now time.Time, which func(*schedState) bool) {
	var acts []action
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	for _, st := range s.states {
		if st.removed || !which(st) {
			continue
		}
		st.owed = false
		if tick := s.catchUpTickLocked(st, now); !tick.IsZero() {
			acts = append(acts, s.tryLateLocked(st, tick, now))
		}
	}
	s.mu.Unlock()
	s.submitTries(acts)
}

// catchUpTickLocked returns the tick of st that the catch-up tries at
// now: its latest within its window, unless st is not locked, this node
// still runs it or saw that tick decided, or its next tick comes before a
// late run would end. Zero: none.
func (s *Scheduler) catchUpTickLocked(st *schedState, now time.Time) time.Time {
	def := st.def
	if !def.lock || def.Elsewhere || st.active > 0 {
		return time.Time{}
	}
	prev := cronspec.Prev(def.Spec, now, s.lookback(def, now))
	if prev.IsZero() || st.decided.atOrAfter(prev) {
		return time.Time{}
	}
	if now.Sub(prev) > max(s.window(def, prev), s.opts.MaxClockSkew) {
		return time.Time{}
	}
	// A tick within max_clock_skew of now is on time, not late: it is
	// always asked for (a node starting just after T whose clock runs
	// ahead would otherwise claim T+1 before a node behind asks for
	// T, and T would be lost). A later one is left to the next tick
	// when that comes before a late run would end.
	if next := def.Spec.Next(now); now.Sub(prev) > s.opts.MaxClockSkew &&
		!next.IsZero() && next.Sub(now) < def.ExpectedRuntime {
		return time.Time{}
	}
	return prev
}

// tryLateLocked makes the catch-up's try of st's tick, in flight from now
// on (submitTries hands it out).
func (s *Scheduler) tryLateLocked(st *schedState, at, now time.Time) action {
	return action{t: s.newTickLocked(st, at, now, true)}
}

// submitTries hands out the catch-up's tries made by tryLateLocked.
func (s *Scheduler) submitTries(acts []action) {
	if len(acts) == 0 {
		return
	}
	tries := acts[:0:0]
	for _, a := range acts {
		if a.t.step == stepRequeue {
			s.work.Submit(a.t) // a tick that waited for its schedule's run (queue.go)
		} else {
			tries = append(tries, a)
		}
	}
	b := s.newBurst(tries)
	for _, a := range tries {
		t := a.t
		t.burst = b
		s.log.Debug("catch-up: trying a tick this node has not seen decided", slog.String("schedule", t.def.ID),
			slog.String("tick", t.at.Format(time.RFC3339)), slog.Duration("late", t.lateness))
		s.work.Submit(t)
	}
}

// lookback is how far back catch-up looks for def's latest tick at now:
// its catch-up window, or by default twice its period (measured between
// its next two ticks; the window of the tick found is checked exactly
// afterwards), and at least max_clock_skew.
func (s *Scheduler) lookback(def *compiled, now time.Time) time.Duration {
	d := s.opts.MaxClockSkew
	switch w := def.CatchupWindow; {
	case w > 0:
		d = max(d, w)
	case w == 0:
		if n := def.Spec.Next(now); !n.IsZero() {
			if n2 := def.Spec.Next(n); !n2.IsZero() {
				d = max(d, 2*n2.Sub(n))
			}
		}
	}
	return d
}
