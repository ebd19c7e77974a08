package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/mutation"
)

// Causes of a job context's cancellation, told apart by context.Cause.
var (
	// errTimeout wraps DeadlineExceeded so a job that checks its context's
	// cause the usual way sees a deadline.
	errTimeout  = fmt.Errorf("scheduler: run timed out: %w", context.DeadlineExceeded)
	errLockLost = errors.New("scheduler: lock lost during the run")
	// errLeaseExpired: the lease deadline passed (lease.go) before a
	// renewal extended it; the lock may be another node's by now.
	errLeaseExpired = errors.New("scheduler: lease deadline passed")
	// errShutdown: the shutdown grace ran out.
	errShutdown = errors.New("scheduler: shutdown grace ran out")
)

// runOutcome is how a tick ended, for end and Snapshot.
type runOutcome struct {
	skip      SkipReason // set when the tick did not run
	abandoned bool       // shutdown began before the run
	result    RunResult
	start     time.Time
	dur       time.Duration
	overrun   bool
	err       error
	attempts  int
	// unstarted: the job never started (its lease ran out first, in the
	// jitter or while the node was frozen). Only a first attempt can be:
	// a retry follows a job that ran and failed.
	unstarted bool
}

// runJob is step 6: it runs f's job, retrying a failed attempt up to the
// schedule's Retries times within the tick, under the same lock (renewed
// during the backoff; a lost lock or a passed lease deadline ends the
// retries), and reports the run (step 8) with its final result.
func (s *Scheduler) runJob(t *tick, l *lease) runOutcome {
	out, r := s.runAttempts(t, l)
	s.reportRan(t, out, r)
	return out
}

// ran is what step 8 reports of a run whose job has returned, besides its
// outcome.
type ran struct {
	runID  string
	manual bool
	fence  int64
	tail   *tailBuffer
}

// reportRan is step 8 for a run: the observer and log line, and the run's
// record.
func (s *Scheduler) reportRan(t *tick, out runOutcome, r ran) {
	s.reportRun(t, out, r.fence)
	s.recordRun(t, r.runID, r.manual, out, r.fence, r.tail)
}

// runAttempts is runJob up to step 8: the job and its retries.
func (s *Scheduler) runAttempts(t *tick, l *lease) (runOutcome, ran) {
	def := t.def
	// A re-run (on_node_loss = "rerun") is the lost run's next attempt,
	// recorded as that run: not manual, its attempts numbered on.
	var rerun *Rerun
	if t.manual != nil {
		rerun = t.manual.Rerun
	}
	firstAttempt := 1
	if rerun != nil {
		firstAttempt = max(rerun.Attempt, 2)
	}
	jt := Tick{ScheduleID: def.ID, Time: t.at, NodeID: s.opts.NodeID, Manual: t.manual != nil && rerun == nil,
		RunID: t.runID(), PrevTime: cronspec.Prev(def.Spec, t.at.Add(-time.Nanosecond), t.window(s)+time.Hour)}
	jt.LastSuccessTime = s.lastSuccess(t)
	var fence int64
	if l != nil {
		jt.LockKey, jt.FencingToken, fence = def.ID, l.h.Fence(), l.h.Fence()
		if !def.lock {
			// A node-local run in a group: its lease is its group slot, and
			// the fence is that slot's sequence, not the schedule's.
			jt.LockKey = l.h.Key()
		}
	}
	var tail *tailBuffer
	if s.runObs != nil {
		tail = newTailBuffer()
		jt.Output = tail
	}
	backoff := def.RetryBackoff
	if backoff <= 0 {
		backoff = DefaultRetryBackoff
	}
	var started time.Time
	if s.startObs != nil || s.tracer != nil {
		started = s.clock.Now()
		if rerun != nil && !rerun.Start.IsZero() {
			started = rerun.Start // its records name the lost run's start
		}
		rs := RunStart{Schedule: def.ID, Tick: t.at, Node: s.opts.NodeID, RunID: jt.RunID, Manual: jt.Manual,
			Start: started, Fence: fence, By: t.by(), Lateness: t.lateness}
		if s.tracer != nil {
			rs.TraceParent = s.traceStart(t, rs)
			jt.TraceParent = rs.TraceParent
		}
		if s.startObs != nil {
			s.startObs.RunStarted(rs)
		}
	}
	var out runOutcome
	var first time.Time // the first attempt's start
	overran := false
	for attempt := firstAttempt; ; attempt++ {
		jt.Attempt = attempt
		if attempt > firstAttempt && s.attemptObs != nil {
			s.attemptObs.AttemptStarted(jt.RunID, attempt)
		}
		out = s.attempt(t, l, jt)
		out.attempts = attempt
		if attempt == firstAttempt {
			first = out.start
		}
		overran = overran || out.overrun
		if out.result != ResultFailure || attempt-firstAttempt >= def.Retries {
			break
		}
		s.log.Info("run failed: retrying within the tick", slog.String("schedule", def.ID),
			slog.String("tick", t.at.Format(time.RFC3339)), slog.Int("attempt", attempt),
			slog.Duration("backoff", backoff), slog.Any("error", out.err))
		stopped := s.backoffStart(jt.RunID)
		waited := !s.stopAsked(jt.RunID) && s.waitHoldingLock(t, l, backoff, stopped)
		s.backoffEnd(jt.RunID)
		if cause := s.stopCause(jt.RunID); cause != nil {
			out.result = ResultCancelled // stopped between attempts: no more
			if errors.Is(cause, errReplaced) {
				out.result = ResultReplaced
			}
			break
		}
		if !waited {
			break // the lock was lost or the node is stopping: no more attempts
		}
		backoff *= 2
	}
	s.stopDone(jt.RunID)
	if !out.unstarted {
		// One run, however many attempts: it starts when its first attempt
		// did, or at the start its observers were told of (history's
		// provisional record of the run names it), and lasts until its
		// last attempt ended, the backoffs between them included.
		end := out.start.Add(out.dur)
		out.start = first
		if !started.IsZero() {
			out.start = started
		}
		if rerun != nil && !rerun.Start.IsZero() {
			out.start = rerun.Start // recorded as the lost run
		}
		out.dur, out.overrun = end.Sub(out.start), overran
	}
	if out.start.IsZero() {
		out.start = s.clock.Now()
	}
	return out, ran{runID: jt.RunID, manual: jt.Manual, fence: fence, tail: tail}
}

// historyTimeout bounds the read of the cluster's last success at a run's
// start: a job waits at most this long for its environment.
const historyTimeout = 250 * time.Millisecond

// lastSuccess is the tick of t's schedule's last successful run, for the
// job's BEXT_LAST_SUCCESS_TICK_TIME: the later of what this node saw and
// what the cluster's history holds. Which jobs read the variable is not
// knowable (a command's script, a Go job's code), so every run's start
// reads the history, once, bounded by historyTimeout; a history that does
// not answer in time (or holds no success) leaves what this node saw,
// which lags the runs of other nodes and may be empty. This node's own
// success of the last tick may not be in the history yet (its record is
// batched): hence the later of the two.
func (s *Scheduler) lastSuccess(t *tick) time.Time {
	seen := t.st.lastSuccess.load(t.at.Location())
	if s.opts.History == nil {
		return seen
	}
	ctx, cancel := context.WithTimeout(s.jobCtx, historyTimeout)
	defer cancel()
	at, ok, err := s.opts.History.LastSuccess(ctx, t.def.ID)
	if err != nil {
		s.log.Debug("reading the cluster's last success failed: the job gets this node's", slog.String("schedule", t.def.ID),
			slog.Any("error", err))
		return seen
	}
	if ok && at.After(seen) {
		return at.In(t.at.Location())
	}
	return seen
}

// DefaultRetryBackoff is the wait before the first retry of a schedule
// with retries and no retry_backoff.
const DefaultRetryBackoff = 10 * time.Second

// waitHoldingLock waits d while holding l (renewing it as a run would), for the
// backoff between attempts. It reports false when the lock was lost, the
// lease deadline passed, shutdown began, or the run was stopped.
func (s *Scheduler) waitHoldingLock(t *tick, l *lease, d time.Duration, stopped <-chan struct{}) bool {
	wait := s.clock.NewTimer(d)
	defer wait.Stop()
	var renewC <-chan time.Time
	if l != nil {
		// The first renewal is due a period after the lease's last one,
		// not after this wait began: a caller that waits again and again
		// (a tick waiting for a group slot, a second at a time) would
		// otherwise restart the period with every wait and never renew.
		r := s.clock.NewTimer(max(s.untilRenewal(l), 0))
		defer r.Stop()
		renewC = r.C()
		for {
			select {
			case <-wait.C():
				return !s.expired(l)
			case <-s.stopCh:
				return false
			case <-stopped:
				return false
			case <-renewC:
				r.Reset(l.every)
				if err := s.renewLease(l); err != nil {
					s.log.Error("lock lost between attempts: no more retries", slog.String("schedule", t.def.ID),
						slog.String("tick", t.at.Format(time.RFC3339)), slog.Any("error", err))
					return false
				}
			}
		}
	}
	select {
	case <-wait.C():
		return true
	case <-s.stopCh:
		return false
	case <-stopped:
		return false
	}
}

// attempt runs f's job once, with a context that the timeout, a failed
// renewal, the lease deadline or the end of the shutdown grace cancels.
// Meanwhile a watch (below) renews l every third of its lease (l is nil
// for a node-local run) and notices an overrun once.
func (s *Scheduler) attempt(t *tick, l *lease, jt Tick) runOutcome {
	def := t.def
	start, leaseAt := s.clockAndLease()
	var fence int64
	if l != nil {
		fence = l.h.Fence()
		if !leaseAt.Before(l.until) {
			// A job starts only before the lease deadline (a tick that
			// waited out its lease in the jitter, or a node frozen since).
			return runOutcome{result: ResultLockLost, start: start, unstarted: true,
				err: fmt.Errorf("%w: %w before the job started", errLockLost, errLeaseExpired)}
		}
	}
	// A child of a context no one cancels (runSet says why): the end of
	// the grace reaches it through s.runs.
	ctx, cancel := context.WithCancelCause(s.runBase)
	defer cancel(nil)
	// The timeout is a true context deadline on the real clock, so a job
	// can read ctx.Deadline() and sees DeadlineExceeded; on any other
	// clock the watch enforces it, so tests drive it.
	_, realTime := s.clock.(realClock)
	if def.Timeout > 0 && realTime {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, def.Timeout, errTimeout)
		defer cancelT()
	}

	w := s.newWatch()
	w.t, w.l, w.fence, w.cancel, w.runID = t, l, fence, cancel, jt.RunID
	w.overrunAt = start.Add(def.ExpectedRuntime)
	if l != nil {
		w.renewAt = start.Add(l.every)
		w.leaseAt = start.Add(l.until.Sub(leaseAt))
		if mutation.On(mutation.NoLeaseTimer) { // mutation (simmut tag only): no timer at the lease deadline (see fire)
			w.leaseAt = time.Time{}
		}
	}
	if def.Timeout > 0 && !realTime {
		w.timeoutAt = start.Add(def.Timeout)
	}
	s.runs.add(w)
	if cause := s.stopCause(jt.RunID); cause != nil {
		cancel(cause) // stopped before this attempt registered (StopRun, ReplaceRun)
	}
	w.start(start)
	err := s.callJob(ctx, def.Job, jt)
	s.runs.remove(w)
	// After stop, no renewal is in flight or to come: the caller may
	// release h.
	overrun := w.stop()
	s.watches.Put(w)

	out := runOutcome{start: start, dur: s.clock.Now().Sub(start), err: err}
	out.overrun = overrun || out.dur > def.ExpectedRuntime
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errLockLost):
		out.result = ResultLockLost
	case errors.Is(cause, errTimeout):
		out.result = ResultTimeout
	case errors.Is(cause, errReplaced):
		out.result = ResultReplaced
	case errors.Is(cause, errShutdown), errors.Is(cause, errStopped):
		out.result = ResultCancelled
	case err != nil:
		out.result = ResultFailure
	default:
		out.result = ResultSuccess
	}
	return out
}

// runSet holds the runs whose job is running, so that the end of the
// shutdown grace cancels them (cancelAll). A run's context is not a child
// of a cancellable one: a context keeps its children in a map under its
// own mutex, and registering there and leaving again was a third of a
// run's cost in a burst of 10,000 ticks (two allocations, a map insert and
// delete, and a mutex that two cores took in turns). Here a run links its
// watch into one of a few lists, picked at random (the runtime's random
// source is per thread; a shared counter moved its cache line between the
// cores at each run).
type runSet struct {
	// stopped is set by cancelAll before it walks the lists: a run added
	// after its list was walked sees it and is cancelled at once.
	stopped atomic.Bool
	lists   [16]runList
}

type runList struct {
	mu   sync.Mutex
	head *watch
	// Keeps lists on separate cache lines, so two cores adding runs to
	// two lists do not invalidate each other's mutex.
	_ [48]byte
}

// add registers w, whose cancel is set, until remove. A run added once
// the grace ended is cancelled at once, as a child of a cancelled context
// would be.
func (r *runSet) add(w *watch) {
	l := &r.lists[rand.Uint32()%uint32(len(r.lists))]
	l.mu.Lock()
	w.list, w.next, w.prev = l, l.head, nil
	if l.head != nil {
		l.head.prev = w
	}
	l.head = w
	stopped := r.stopped.Load()
	l.mu.Unlock()
	if stopped {
		w.cancel(errShutdown)
	}
}

// remove unregisters w once its job returned.
func (r *runSet) remove(w *watch) {
	l := w.list
	l.mu.Lock()
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	l.mu.Unlock()
	w.list, w.next, w.prev = nil, nil, nil
}

// cancelAll cancels every registered run, and every run added from now
// on, with errShutdown: the end of the shutdown grace.
func (r *runSet) cancelAll() {
	r.stopped.Store(true)
	for i := range r.lists {
		l := &r.lists[i]
		l.mu.Lock()
		for w := l.head; w != nil; w = w.next {
			w.cancel(errShutdown)
		}
		l.mu.Unlock()
	}
}

// watch keeps an eye on one run while its job runs on the tick's
// goroutine: one timer of the injected clock, armed to whichever of the
// renewal, the lease deadline, the overrun and the timeout comes first,
// calls fire on a goroutine of its own. A job that ends before the first
// of them (most do) costs one timer armed and stopped, and no extra
// goroutine.
//
// A renewal runs outside mu, with the timer armed to what comes next: the
// lease deadline fires while a renewal hangs (a stalled link, a backend
// slow to give up), cancels the job and the renewal's context, and the
// job never outlives its lease.
type watch struct {
	s      *Scheduler
	t      *tick
	l      *lease // nil for a node-local run: nothing to renew
	fence  int64
	cancel context.CancelCauseFunc
	runID  string // for StopRun
	// list, next, prev: w's place in s.runs while its job runs.
	list       *runList
	next, prev *watch

	mu    sync.Mutex // held by fire, except during a renewal
	timer Timer

	// renewAt, timeoutAt, overrunAt, leaseAt: when each is due, on the
	// scheduler's clock; zero once done. leaseAt is l.until moved to that
	// clock, checked again on the lease clock when it fires.
	renewAt, timeoutAt, overrunAt, leaseAt time.Time

	// renewing: a renewal is in flight (outside mu); cancelRenew ends its
	// context. lost: the lease is over (deadline passed or renewal
	// failed) and the job cancelled; nothing more is renewed.
	renewing    bool
	cancelRenew context.CancelFunc
	lost        bool
	// owed: a renewal's period came round while the last was in flight;
	// it is sent as soon as that one returns, not a whole period later.
	owed bool

	pending bool // the timer is armed, or fired and fire has not yet run
	ended   bool // the job returned: fire does nothing any more
	// endWait is made by stop when a fire is on its way, which closes it
	// once it has seen ended; renewWait likewise when a renewal is in
	// flight, closed by its fire once the renewal returned.
	endWait, renewWait chan struct{}
	overrun            bool
}

// newWatch returns an unused watch. Watches are kept for reuse, timer
// included (a stopped timer is re-armed with Reset), because a burst of
// ticks would otherwise allocate one of each per run.
func (s *Scheduler) newWatch() *watch {
	if w, ok := s.watches.Get().(*watch); ok {
		return w
	}
	return &watch{s: s}
}

// start arms the timer. fire cannot run before start returns.
func (w *watch) start(now time.Time) {
	w.mu.Lock()
	d := earliest(w.renewAt, w.timeoutAt, w.overrunAt, w.leaseAt).Sub(now)
	if w.timer == nil {
		w.timer = w.s.clock.AfterFunc(d, w.fire)
	} else {
		w.timer.Reset(d)
	}
	w.pending = true
	w.mu.Unlock()
}

// stop ends the watch once the job returned and reports whether an overrun
// was noticed. It waits for a fire in progress or on its way and for a
// renewal in flight (bounded by its context), so no renewal runs after it
// returns, no goroutine of the watch outlives the tick, and the watch can
// be reused.
func (w *watch) stop() (overrun bool) {
	w.mu.Lock()
	w.ended = true
	var wait, renewal chan struct{}
	if w.pending && !w.timer.Stop() {
		wait = make(chan struct{})
		w.endWait = wait
	}
	if w.renewing {
		renewal = make(chan struct{})
		w.renewWait = renewal
	}
	overrun = w.overrun
	w.mu.Unlock()
	if wait != nil {
		<-wait
	}
	if renewal != nil {
		<-renewal
	}
	// Reset for the next run under mu, field by field: only s, timer and
	// mu itself are kept. A firing whose goroutine started before Stop
	// stopped a later arming may still be locking mu (the simulation's
	// race detector caught the whole-struct reset writing mu under it,
	// seed 1215); it then finds a watch with nothing due, or the next
	// run's, and only re-arms the timer to what that run has due.
	w.mu.Lock()
	w.t, w.l, w.fence, w.cancel = nil, nil, 0, nil
	w.list, w.next, w.prev = nil, nil, nil
	w.renewAt, w.timeoutAt, w.overrunAt, w.leaseAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	w.renewing, w.cancelRenew, w.lost, w.owed = false, nil, false, false
	w.pending, w.ended, w.endWait, w.renewWait, w.overrun = false, false, nil, nil, false
	w.mu.Unlock()
	return overrun
}

// fire does what is due: cancels the job at its timeout or at its lease
// deadline, logs an overrun, renews the lock (cancelling the job if that
// fails), and re-arms the timer to what comes next.
func (w *watch) fire() {
	w.mu.Lock()
	w.pending = false
	if w.ended {
		// Unlocked before stop hears of it: stop then resets w for reuse.
		ch := w.endWait
		w.mu.Unlock()
		if ch != nil {
			close(ch)
		}
		return
	}
	s, def := w.s, w.t.def
	now := s.clock.Now()
	var leaseDue bool
	var left time.Duration // of the lease, on the lease clock
	if w.l != nil && !w.lost {
		// Read on the lease clock, which counts a suspend the scheduler's
		// clock may not: the timer only says when to look.
		left = w.l.until.Sub(s.leaseNow())
		if leaseDue = left <= 0; leaseDue {
			w.lost = true
			w.renewAt, w.leaseAt = time.Time{}, time.Time{}
		} else {
			w.leaseAt = now.Add(left)
		}
	}
	if mutation.On(mutation.NoLeaseTimer) { // mutation (simmut tag only): no timer at the lease deadline (see attempt)
		w.leaseAt = time.Time{}
	}
	renewDue := due(w.renewAt, now)
	if renewDue {
		w.renewAt = now.Add(w.l.every)
		// One renewal at a time: one still in flight is followed by the
		// one owed as soon as it returns.
		if w.renewing {
			w.owed, renewDue = true, false
		}
	}
	timeoutDue, overrunDue := due(w.timeoutAt, now), due(w.overrunAt, now)
	if timeoutDue {
		w.timeoutAt = time.Time{}
	}
	if overrunDue {
		w.overrunAt = time.Time{}
	}
	// Re-armed before renewing: the period runs start to start, a test
	// that saw the renewal knows the next one is armed, and the lease
	// deadline fires even while the renewal hangs.
	if next := earliest(w.renewAt, w.timeoutAt, w.overrunAt, w.leaseAt); !next.IsZero() {
		w.timer.Reset(next.Sub(now))
		w.pending = true
	}
	if timeoutDue {
		w.cancel(errTimeout)
	}
	if overrunDue {
		w.overrun = true
		s.log.Warn("run overran its expected runtime; the lock is kept by renewal",
			slog.String("schedule", def.ID), slog.String("tick", w.t.at.Format(time.RFC3339)),
			slog.Duration("expected_runtime", def.ExpectedRuntime), slog.Int64("fence", w.fence))
	}
	if leaseDue {
		// Never renew again nor re-acquire: the backend may give the lock
		// to another node from now on, so the job must stop at once.
		s.log.Error("lease deadline passed with no renewal answered: cancelling the job", slog.String("schedule", def.ID),
			slog.String("tick", w.t.at.Format(time.RFC3339)), slog.Int64("fence", w.fence),
			slog.Duration("lease", w.l.len), slog.Duration("over_by", -left))
		w.cancel(fmt.Errorf("%w: %w", errLockLost, errLeaseExpired))
		if w.cancelRenew != nil {
			w.cancelRenew()
		}
	}
	if !renewDue {
		w.mu.Unlock()
		return
	}
	w.renew(left)
}

// renew renews w's lease, with left of it to go; w.mu is held on entry
// and released on return, and not held while the backend is asked.
func (w *watch) renew(left time.Duration) {
	s, l := w.s, w.l
	for {
		if !w.renewOnce(s, l, left) {
			return
		}
		// A period came round while this renewal was in flight: the one
		// owed goes now (a loop, not a call: a backend slower than the
		// period for a long run must not grow the stack).
		w.owed = false
		left = l.until.Sub(s.leaseNow())
	}
}

// renewOnce sends one renewal; w.mu is held on entry. It reports true,
// with w.mu still held, when another renewal is owed; else it has
// released w.mu.
func (w *watch) renewOnce(s *Scheduler, l *lease, left time.Duration) bool {
	sent := s.leaseNow()
	ctx, cancel := s.renewCtx(l, left)
	w.renewing, w.cancelRenew = true, cancel
	w.mu.Unlock()
	err := s.renewHeld(ctx, l)
	cancel()
	w.mu.Lock()
	w.renewing, w.cancelRenew = false, nil
	if w.ended {
		// Unlocked before stop hears of it: stop then resets w for reuse.
		ch := w.renewWait
		w.mu.Unlock()
		close(ch)
		return false
	}
	if w.lost {
		w.mu.Unlock()
		return false // the lease deadline passed meanwhile: the job is cancelled
	}
	if err != nil {
		// Never renew again nor re-acquire: another node may hold
		// the lock now, so the job must stop at once.
		s.log.Error("lock lost during the run: cancelling the job", slog.String("schedule", w.t.def.ID),
			slog.String("tick", w.t.at.Format(time.RFC3339)), slog.Int64("fence", w.fence),
			slog.Any("error", err))
		w.cancel(fmt.Errorf("%w: %w", errLockLost, err))
		w.lost = true
		w.renewAt, w.leaseAt = time.Time{}, time.Time{}
		w.mu.Unlock()
		return false
	}
	l.until = sent.Add(l.len)
	w.leaseAt = s.clock.Now().Add(l.until.Sub(s.leaseNow()))
	if w.owed {
		return true
	}
	w.mu.Unlock()
	return false
}

// due reports whether deadline is set and reached at now.
func due(deadline, now time.Time) bool { return !deadline.IsZero() && !now.Before(deadline) }

// earliest returns the earliest of the non-zero times (zero if none).
func earliest(ts ...time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}

// callJob runs job, turning a panic into an error so a broken Go job never
// crashes the scheduler.
func (s *Scheduler) callJob(ctx context.Context, job Job, t Tick) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("scheduler: job panicked: %v", r)
			s.log.Error("job panicked", slog.String("schedule", t.ScheduleID),
				slog.String("tick", t.Time.Format(time.RFC3339)), slog.Any("panic", r),
				slog.String("stack", string(debug.Stack())))
		}
	}()
	return job.Run(ctx, t)
}
