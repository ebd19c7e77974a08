package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Causes of a job context's cancellation, told apart by context.Cause.
var (
	// errTimeout wraps DeadlineExceeded so a job that checks its context's
	// cause the usual way sees a deadline.
	errTimeout  = fmt.Errorf("scheduler: run timed out: %w", context.DeadlineExceeded)
	errLockLost = errors.New("scheduler: lock lost during the run")
)

// runOutcome is how a tick ended, for finish and Snapshot.
type runOutcome struct {
	skip      SkipReason // set when the tick did not run
	abandoned bool       // shutdown began before the run
	result    RunResult
	start     time.Time
	dur       time.Duration
	overrun   bool
	err       error
}

// runJob is step 6: it runs f's job with a context that the timeout, a
// failed renewal or the end of the shutdown grace cancels, renews h about
// every TTL/3 meanwhile (h is nil for a node-local run), notices an overrun
// once, and reports the run (step 8).
func (s *Scheduler) runJob(f fired, h *locking.Handle) runOutcome {
	def := f.def
	t := Tick{ScheduleID: def.ID, Time: f.tick, NodeID: s.opts.NodeID}
	var fence int64
	if h != nil {
		t.LockKey, t.FencingToken, fence = def.ID, h.Fence(), h.Fence()
	}
	ctx, cancel := context.WithCancelCause(s.jobCtx)
	defer cancel(nil)

	// Renewals and the overrun are timers of the injected clock, so tests
	// drive them; so is the timeout, unless the clock is the real one.
	var renewT, timeoutT, overrunT Timer
	var renewC, timeoutC, overrunC <-chan time.Time
	every := time.Duration(0)
	if h != nil {
		every = h.TTL() / 3
		renewT = s.clock.NewTimer(every)
		defer renewT.Stop()
		renewC = renewT.C()
	}
	switch _, real := s.clock.(realClock); {
	case def.Timeout > 0 && real:
		// On the real clock the timeout is a true context deadline, so a
		// job can read ctx.Deadline() and sees DeadlineExceeded.
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, def.Timeout, errTimeout)
		defer cancelT()
	case def.Timeout > 0:
		timeoutT = s.clock.NewTimer(def.Timeout)
		defer timeoutT.Stop()
		timeoutC = timeoutT.C()
	}
	overrunT = s.clock.NewTimer(def.ExpectedRuntime)
	defer overrunT.Stop()
	overrunC = overrunT.C()

	start := s.clock.Now()
	done := make(chan error, 1)
	go func() { done <- s.callJob(ctx, def.Job, t) }()

	overrun := false
	for {
		select {
		case err := <-done:
			out := runOutcome{start: start, dur: s.clock.Now().Sub(start), err: err}
			out.overrun = overrun || out.dur > def.ExpectedRuntime
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errLockLost):
				out.result = ResultLockLost
			case errors.Is(cause, errTimeout):
				out.result = ResultTimeout
			case err != nil:
				out.result = ResultFailure
			default:
				out.result = ResultSuccess
			}
			s.reportRun(f, out, fence)
			return out
		case <-renewC:
			// Re-armed before renewing: the period runs start to start, and
			// a test that saw the renewal knows the next one is armed.
			renewT.Reset(every)
			if err := s.renew(h, every); err != nil {
				// Never renew again nor re-acquire: another node may hold
				// the lock now, so the job must stop at once.
				s.log.Error("lock lost during the run: cancelling the job", slog.String("schedule", def.ID),
					slog.String("tick", f.tick.Format(time.RFC3339)), slog.Int64("fence", fence),
					slog.Any("error", err))
				cancel(fmt.Errorf("%w: %w", errLockLost, err))
				renewT.Stop()
				renewC = nil
			}
		case <-timeoutC:
			cancel(errTimeout)
			timeoutC = nil
		case <-overrunC:
			overrun = true
			overrunC = nil
			s.log.Warn("run overran its expected runtime; the lock is kept by renewal",
				slog.String("schedule", def.ID), slog.String("tick", f.tick.Format(time.RFC3339)),
				slog.Duration("expected_runtime", def.ExpectedRuntime), slog.Int64("fence", fence))
		}
	}
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
