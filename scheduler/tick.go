package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// This file is where a tick is decided: DESIGN.md "A tick's life", steps
// 1 to 8. Step 1's overlap check is made by the loop as the tick fires
// (popDueLocked in loop.go), because it needs the schedule's state at that
// instant; the pause check is made by the backend inside try-lock-tick.
// Everything else happens here, on the tick's own goroutine (a worker of
// pool.go).
//
// What keeps a tick from running twice is the backend's tick mark, not a
// lock held after the run: try-lock-tick answers "done" to every node that
// asks for T once T was claimed, however far behind its clock runs, so the
// lock is released the moment the run ends (step 7) and the next tick is
// free to run anywhere.

// fired is one tick handed from the loop to its goroutine.
type fired struct {
	st       *schedState
	def      *compiled // the definition the tick fired with (Reload may swap st.def)
	tick     time.Time // T, the scheduled time
	lateness time.Duration
	catchup  bool    // tried by the catch-up (catchup.go), not by the loop
	counted  bool    // a catch-up granted, and so counted in st.active
	manual   *Manual // a manual run (manual.go), not a tick of the loop
	burst    *burst  // bounds its try-lock-tick; set when the tick locks
	// preferred: this node is the tick's preferred one and counts its
	// try-lock-tick in the handoff's asking until answered (handoff.go).
	preferred bool
	// handed: its handoff was decided already (handOffAll) and it asks.
	handed bool
	// win is the tick's catch-up window (Scheduler.window) when winSet:
	// the loop knows the next tick already, and a window of the default
	// (one period) was a Next call each time it was asked, twice a tick.
	winSet bool
	win    time.Duration
	// resend, once its try-lock-tick was answered undecided, is the
	// request it sends again, token included (resend.go).
	resend *resending
}

// window is s.window(f.def, f.tick), known or computed.
func (f fired) window(s *Scheduler) time.Duration {
	if f.winSet {
		return f.win
	}
	return s.window(f.def, f.tick)
}

// runID is the run's id: the request's for a manual run, else a fresh one.
func (f fired) runID() string {
	if f.manual != nil && f.manual.RunID != "" {
		return f.manual.RunID
	}
	return newRunID()
}

// runTask is what a worker (pool.go) does with a task. It returns the
// end of a run whose job returned in it, for the pool to defer
// (pool.later).
func (s *Scheduler) runTask(t task) (later task, ok bool) {
	var c *releaseCall
	switch {
	case t.call != nil:
		c = s.lockAnswered(t.call)
	case t.ran != nil:
		s.afterRun(t.ran)
	case t.turn == turnAsk:
		c = s.ask(t.f)
	case t.f.manual != nil:
		s.handleManual(t.f)
	default:
		c = s.handleTick(t.f)
	}
	return task{ran: c}, c != nil
}

// handleTick carries tick f from step 2 to step 4's request; locked
// carries it on from the answer, and returns what is left of it once its
// job returned (afterRun), if that is the caller's to do.
func (s *Scheduler) handleTick(f fired) *releaseCall {
	// Step 2: resolve the hint (done once per schedule by compile).
	if !f.def.lock {
		s.handleLocal(f)
		return nil
	}

	// A catch-up try still queued when shutdown begins is not sent: no
	// mark is raised for it, so another node, or this one once restarted,
	// still catches the tick up. At 100,000 schedules the queue of tries
	// (one backend round trip each) kept a stopping node running.
	if f.catchup && s.stoppingNow() {
		f.burst.done()
		s.finish(f, runOutcome{abandoned: true})
		s.wg.Done()
		return nil
	}

	// A node that is not the tick's preferred one waits its turn, and
	// drops the tick if it hears meanwhile that it was decided (handoff.go).
	// (dispatch decided it already for the loop's ticks: handed.)
	turn := handoffAsk
	if !f.handed {
		turn = s.handOff(&f)
	}
	switch turn {
	case handoffHeard:
		s.handedOff(f)
		s.wg.Done()
		return nil
	case handoffWaiting:
		return nil // back as a task when its wait ends (resumeWaiters)
	}
	return s.ask(f)
}

// ask is steps 3 and 4 of tick f: try-lock-tick (TTL from compile). The
// backend decides done, paused, missed, contended or granted, on its own
// clock; an answer that leaves it undecided (no reply in time) sends the
// same request again (resend.go). Unbatched, it returns what locked
// returns.
func (s *Scheduler) ask(f fired) *releaseCall {
	var req locking.TickRequest
	ctx := f.burst.ctx
	if f.resend != nil {
		req, ctx = f.resend.req, f.resend.ctx
	} else {
		req = s.lockRequest(f)
	}
	if s.batch != nil {
		// Batched: the tick goes on in lockAnswered, on whichever worker
		// takes it once its batch is answered; this one is free now
		// (unless it sends batches itself).
		s.work.asking.Add(1) // until deliverAnswers: see pool.asking
		s.batch.submit(&tickCall{ctx: ctx, req: req, tag: tickWait{f: f}})
		return nil
	}
	before, sent := s.clockAndLease()
	ans, err := s.opts.Locker.TryLockTick(ctx, req)
	s.preferredAnswered(f)
	if s.resend(&f, req, ans, &err, sent) {
		return nil // back as a task that asks again
	}
	return s.tickAnswered(f, ans, err, sent, before, s.clock.Now())
}

// sendingRequests stamps a batch of try-lock-ticks about to be sent with
// the time it is sent, on the lease clock (its leases count from then) and
// on the scheduler's: one reading of each for the batch.
func (s *Scheduler) sendingRequests(calls []*tickCall) {
	before, sent := s.clockAndLease()
	for _, c := range calls {
		c.tag.sent, c.tag.before = sent, before
	}
}

// preferredAnswered ends the count of f's try-lock-tick in the handoff's
// asking (handoff.go) once it was answered.
func (s *Scheduler) preferredAnswered(f fired) {
	if f.preferred {
		s.answered(f.tick)
	}
}

// deliverAnswers hands ticks whose batched try-lock-tick was answered
// back to the pool, all in one submit (batch.go's deliver), ahead of the
// ticks that have not asked yet: a granted one's lease is running.
func (s *Scheduler) deliverAnswers(calls []*tickCall) {
	after := s.clock.Now()
	for _, c := range calls {
		c.tag.after = after
		s.preferredAnswered(c.tag.f)
	}
	s.work.submitAnswered(calls)
}

// lockAnswered carries on a tick whose batched try-lock-tick was answered;
// it returns what locked returns.
func (s *Scheduler) lockAnswered(c *tickCall) *releaseCall {
	w, err := c.tag, c.err
	f := w.f
	if s.resend(&f, c.req, c.ans, &err, w.sent) {
		return nil // back as a task that asks again, through the batcher
	}
	return s.tickAnswered(f, c.ans, err, w.sent, w.before, w.after)
}

// tickAnswered carries tick f on from its try-lock-tick's last answer,
// sent at sent on the lease clock, between before and after on the
// scheduler's; it returns what locked returns. A grant that came late
// (after a resend, or after its request's context ended) runs only if it
// still can (lateGrant).
func (s *Scheduler) tickAnswered(f fired, ans locking.TickAnswer, err error, sent, before, after time.Time) *releaseCall {
	late := f.resend != nil
	if err != nil && ans.Handle != nil {
		// Granted, but the request's context ended before the answer
		// came (batch.go sendOne): the mark is raised for this grant, so
		// no other node runs T; this one does, if it still can.
		err, late = nil, true
	}
	l, why := s.lockAnswer(f, ans, err, sent, before, after)
	if l != nil && late && !s.lateGrant(f, l) {
		return nil
	}
	if err == nil && ans.Verdict == locking.TickExpired {
		s.grantExpired(f, ans.Fence)
		return nil
	}
	return s.locked(f, l, why)
}

// handleLocal carries node-local tick f from step 2 to step 8.
func (s *Scheduler) handleLocal(f fired) {
	defer s.wg.Done()
	// No backend decides for a node-local tick: this node applies the
	// catch-up window itself (a node stopped across a tick runs it
	// late, once, within the window).
	if f.lateness > max(f.window(s), s.opts.MaxClockSkew) {
		s.reportSkip(f, SkipMissed, 0)
		s.finish(f, runOutcome{skip: SkipMissed})
		return
	}
	if s.nodeLocalPaused(f) {
		s.reportSkip(f, SkipPaused, 0)
		s.finish(f, runOutcome{skip: SkipPaused})
		return
	}
	if s.abandon(f) {
		return
	}
	s.finish(f, s.runJob(f, nil))
}

// locked carries locked tick f on from step 4's answer: l, the granted
// lease, or nil and why the tick is skipped. Once f's job has returned,
// it returns the rest (steps 7 and 8) for its caller to do, with afterRun:
// a worker defers it behind the ticks waiting to start (pool.later).
func (s *Scheduler) locked(f fired, l *lease, why SkipReason) *releaseCall {
	if l == nil {
		defer s.wg.Done()
		if f.catchup {
			// A catch-up try that was not granted is no tick of this
			// node's: another node ran it, or it was decided otherwise.
			s.finish(f, runOutcome{abandoned: true})
			return nil
		}
		s.reportSkip(f, why, 0)
		s.finish(f, runOutcome{skip: why})
		return nil
	}
	h := l.h
	if f.catchup {
		// Granted: from now on it is a run of the schedule on this node,
		// and it runs even if a regular tick of the schedule fired here
		// meanwhile. The grant raised the mark to T, so no node will run
		// T if this one does not; and that regular tick holds no live
		// lease of the schedule's lock (under overlap = "skip" the lock
		// was free when this try was granted, and a grant taken after it
		// waits for its release), so the two runs do not overlap under
		// the lock (TestGrantedCatchUpRunsBesideARegularTickInFlight).
		s.mu.Lock()
		f.st.active++
		s.mu.Unlock()
		f.counted = true
		s.obs.TickFired(f.st.id, f.tick, s.clock.Now().Sub(f.tick))
	}

	// Step 5: the jitter, spent holding the lock. Shutdown ends the wait
	// and the job starts at once: T is marked, no other node will run it.
	if !s.waitJitter(f, l) {
		s.release(f.def.ID, h, "lock lost during the jitter")
		s.reportSkip(f, SkipBackendError, h.Fence())
		s.finish(f, runOutcome{skip: SkipBackendError})
		s.wg.Done()
		return nil
	}

	// Step 6: run, renewing the lock; the run's watch cancels the job when
	// the lease deadline passes (run.go).
	out, r := s.runAttempts(f, l)
	c := l.end
	c.tag.f, c.tag.out, c.tag.ran = f, out, r
	return c
}

// afterRun is steps 7 and 8 of a locked tick whose job has returned: the
// run is reported, then its lock released at once. The mark, not the
// lock, keeps T from running again. A run ended as lock_lost is released
// too: a passed lease deadline does not mean the backend freed the lock
// (a Postgres holder frozen past its lease still has its session), and
// the release is token-checked, so it never frees another holder's. The
// tick is finished once the lock is given back (release.go).
func (s *Scheduler) afterRun(c *releaseCall) {
	s.reportRan(c.tag.f, c.tag.out, c.tag.ran)
	s.releaseAfterRun(c)
}

// lockRequest is step 4's try-lock-tick request for f. Its token is the
// scheduler's own, so that a resend carries it (resend.go); a backend in
// this process, whose answer is never lost, draws its own (more cheaply).
func (s *Scheduler) lockRequest(f fired) locking.TickRequest {
	def := f.def
	var token string
	if !inProcess(s.opts.Locker) {
		token = newTickToken()
	}
	return locking.TickRequest{
		Key:     def.ID,
		Tick:    f.tick,
		TTL:     def.ttl,
		PerTick: def.Overlap == OverlapAllow,
		Floor:   f.st.decided.load(f.tick.Location()),
		MaxSkew: s.opts.MaxClockSkew,
		Window:  f.window(s),
		Token:   token,
	}
}

// newTickToken draws the token of a try-lock-tick. Empty if the system's
// random source fails: the backend then draws one, and the request is not
// resent.
func newTickToken() string {
	t, err := locking.NewToken()
	if err != nil {
		return ""
	}
	return t
}

// lockAnswer is step 4's answer to f's try-lock-tick, sent at sent on
// the lease clock, between before and after on the scheduler's. It
// returns the granted lease, or nil and why the tick is skipped.
func (s *Scheduler) lockAnswer(f fired, ans locking.TickAnswer, err error, sent, before, after time.Time) (*lease, SkipReason) {
	if f.resend != nil {
		f.resend.cancel()
	} else {
		f.burst.done() // f's request is answered: its context is done with
	}
	st, def := f.st, f.def
	if err != nil {
		var ahead *locking.AheadError
		if errors.As(err, &ahead) {
			// This node's clock runs ahead of the backend's: its ticks are
			// refused until the clock is fixed, and the others run them.
			s.clockOffset(ahead.Offset)
			s.log.Error("tick refused: this node's clock runs ahead of the lock backend's",
				slog.String("schedule", def.ID), slog.String("tick", f.tick.Format(time.RFC3339)),
				slog.Duration("offset", ahead.Offset), slog.Duration("max_clock_skew", s.opts.MaxClockSkew))
			if f.resend != nil && s.runObs != nil {
				// A resend refused decides nothing of the attempts before
				// it: one delayed on its way may still reach the backend
				// once T is due there, and be granted, to this node that
				// gave T up (the backends record a resend's contended or
				// done, not a refusal). T is then consumed, and history
				// says so, as for a tick whose resends went unanswered.
				s.runObs.RunRecorded(RunRecord{Schedule: def.ID, Tick: f.tick, Node: s.opts.NodeID, Result: ResultNotRun,
					Start: s.clock.Now(), RunID: f.runID(),
					Err: fmt.Errorf("%w: a resend was refused as ahead of the backend's clock, and an earlier attempt may still reach it: %w", ErrGrantUnknown, err)})
			}
			return nil, SkipBackendError
		}
		if errors.Is(err, ErrGrantUnknown) && s.runObs != nil {
			// The backend may have granted T, and then no node runs it:
			// history says so, where the tick would otherwise be consumed
			// with no word (a skip is a counter, not a record).
			s.runObs.RunRecorded(RunRecord{Schedule: def.ID, Tick: f.tick, Node: s.opts.NodeID, Result: ResultNotRun,
				Start: s.clock.Now(), Err: err, RunID: f.runID()})
		}
		s.backendFailed(st, f.tick, err)
		return nil, SkipBackendError
	}
	if !ans.Now.IsZero() {
		// This node's clock minus the backend's, read at the middle of the
		// round trip.
		s.clockOffset(before.Add(after.Sub(before) / 2).Sub(ans.Now))
	}
	s.backendAnswered()
	if s.pastKeep(f, ans.Verdict) {
		err := fmt.Errorf("%w: a resend was answered %v after the backend's record of an earlier attempt's grant may have lapsed",
			ErrGrantUnknown, ans.Verdict)
		s.log.Warn("tick undecided: its try-lock-tick's resend came too late to be told of a grant", slog.String("schedule", def.ID),
			slog.String("tick", f.tick.Format(time.RFC3339)), slog.Any("error", err))
		if s.runObs != nil {
			s.runObs.RunRecorded(RunRecord{Schedule: def.ID, Tick: f.tick, Node: s.opts.NodeID, Result: ResultNotRun,
				Start: s.clock.Now(), Err: err, RunID: f.runID()})
		}
		if ans.Verdict != locking.TickContended {
			st.decided.raise(f.tick) // done, missed, paused: the mark is at T or past it
		}
		return nil, SkipBackendError
	}

	if ans.Verdict != locking.TickContended {
		st.decided.raise(f.tick)
	}

	switch ans.Verdict {
	case locking.TickGranted:
		if ans.Handle == nil {
			s.log.Error("try-lock-tick granted without a handle: tick not run", slog.String("schedule", def.ID))
			return nil, SkipBackendError
		}
		return s.newTickLease(ans.Handle, sent), ""
	case locking.TickDone, locking.TickContended:
		return nil, SkipContended
	case locking.TickPaused:
		return nil, SkipPaused
	case locking.TickMissed:
		return nil, SkipMissed
	case locking.TickExpired:
		return nil, SkipBackendError // recorded by grantExpired
	}
	s.log.Error("try-lock-tick answered an unknown verdict: tick not run", slog.String("schedule", def.ID),
		slog.String("verdict", ans.Verdict.String()))
	return nil, SkipBackendError
}

// nodeLocalPaused reads a node-local tick's pause flag from the cluster
// state (a locked tick learns it inside try-lock-tick). A backend that
// does not answer does not stop a node-local run: it needs no backend.
func (s *Scheduler) nodeLocalPaused(f fired) bool {
	p, ok := s.opts.Locker.(locking.Pauser)
	if !ok {
		return false
	}
	ctx := s.jobCtx
	if !inProcess(p) {
		// A backend across the network is given a second. One in this
		// process answers at once, and a timer per tick was half the
		// cost of a node-local tick in a burst.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Second)
		defer cancel()
	}
	pz, err := p.GetPause(ctx, f.def.ID)
	if err != nil {
		s.log.Debug("pause flag not read: node-local tick runs", slog.String("schedule", f.def.ID), slog.Any("error", err))
		return false
	}
	return pz.Active(s.clock.Now())
}

// clockOffset reports this node's clock offset to an observer that wants it.
func (s *Scheduler) clockOffset(d time.Duration) {
	if s.hand != nil {
		s.hand.offset.Store(int64(d)) // the handoff counts turns on the backend's clock
	}
	if s.clockObs != nil {
		s.clockObs.ClockOffset(d)
	}
}

// window is the catch-up window of tick T of def: how late T may still
// start. The default is one period (until the next tick is due).
func (s *Scheduler) window(def *compiled, tick time.Time) time.Duration {
	if def.CatchupWindow != 0 {
		return windowAfter(def, tick, time.Time{})
	}
	return windowAfter(def, tick, def.Spec.Next(tick))
}

// windowAfter is window for a tick whose next tick is next (read only
// for the default window).
func windowAfter(def *compiled, tick, next time.Time) time.Duration {
	switch w := def.CatchupWindow; {
	case w == NoCatchup:
		return 0
	case w > 0:
		return w
	}
	if !next.IsZero() {
		return next.Sub(tick)
	}
	return 0
}

// waitJitter waits a random delay in [0, Jitter) while holding l,
// renewing it as a run would. It returns false when the lock was lost.
// Shutdown ends the wait early: the job then starts at once.
func (s *Scheduler) waitJitter(f fired, l *lease) bool {
	if f.def.Jitter <= 0 {
		return true
	}
	d := time.Duration(s.opts.Rand(int64(f.def.Jitter)))
	if d <= 0 {
		return true
	}
	d = min(d, f.def.Jitter-1)
	wait := s.clock.NewTimer(d)
	defer wait.Stop()
	r := s.clock.NewTimer(l.every)
	defer r.Stop()
	for {
		select {
		case <-wait.C():
			return true
		case <-s.stopCh:
			return true
		case <-r.C():
			r.Reset(l.every) // before renewing, as in runJob
			if err := s.renewLease(l); err != nil {
				s.log.Error("lock lost during jitter: tick not run", slog.String("schedule", f.def.ID),
					slog.String("tick", f.tick.Format(time.RFC3339)), slog.Int64("fence", l.h.Fence()),
					slog.Any("error", err))
				return false
			}
		}
	}
}

// stoppingNow reports whether shutdown has begun.
func (s *Scheduler) stoppingNow() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// abandon reports whether shutdown began before node-local f's job
// started; if so it drops the tick (logged) and finishes it. A locked tick
// is never abandoned once granted: its mark is raised, so no other node
// would run it.
func (s *Scheduler) abandon(f fired) bool {
	select {
	case <-s.stopCh:
	default:
		return false
	}
	s.log.Info("shutting down: node-local tick abandoned before its run", slog.String("schedule", f.def.ID),
		slog.String("tick", f.tick.Format(time.RFC3339)))
	s.finish(f, runOutcome{abandoned: true})
	return true
}

// finish ends a tick and records its outcome.
func (s *Scheduler) finish(f fired, out runOutcome) {
	s.mu.Lock()
	s.finishLocked(f, out)
	s.notifyLocked()
	s.mu.Unlock()
}

// finishLocked is finish under s.mu, without waking WaitIdle callers.
func (s *Scheduler) finishLocked(f fired, out runOutcome) {
	st := f.st
	if !out.abandoned {
		st.last.tick, st.last.skip = unixOrZero(f.tick), indexOf(skipReasons[:], out.skip)
		if out.skip == "" {
			st.last.result, st.last.runStart, st.last.runDur = indexOf(runResults[:], out.result), unixOrZero(out.start), out.dur
		}
	}
	if !f.catchup || f.counted {
		st.active--
	}
	s.inflight--
	s.forgetIfDoneLocked(st)
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
		// Logged once per outage by backendFailed; each tick at debug.
		level = slog.LevelDebug
	case SkipMissed:
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
	if f.lateness > s.opts.MaxClockSkew {
		attrs = append(attrs, slog.Duration("late", f.lateness))
	}
	if out.err != nil {
		attrs = append(attrs, slog.Any("error", out.err))
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "tick ran", attrs...)
}
