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
	// The timeout is a true context deadline on the real clock, so a job
	// can read ctx.Deadline() and sees DeadlineExceeded; on any other
	// clock the watch below enforces it, so tests drive it.
	_, realTime := s.clock.(realClock)
	if def.Timeout > 0 && realTime {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, def.Timeout, errTimeout)
		defer cancelT()
	}

	// One timer of the injected clock watches the renewals, the overrun
	// and the timeout, armed to whichever comes first.
	start := s.clock.Now()
	var renewAt, timeoutAt time.Time
	overrunAt := start.Add(def.ExpectedRuntime)
	every := time.Duration(0)
	if h != nil {
		every = h.TTL() / 3
		renewAt = start.Add(every)
	}
	if def.Timeout > 0 && !realTime {
		timeoutAt = start.Add(def.Timeout)
	}
	watch := s.clock.NewTimer(earliest(renewAt, timeoutAt, overrunAt).Sub(start))
	defer watch.Stop()

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
		case <-watch.C():
		}
		now := s.clock.Now()
		renewDue := due(renewAt, now)
		if renewDue {
			renewAt = now.Add(every)
		}
		timeoutDue, overrunDue := due(timeoutAt, now), due(overrunAt, now)
		if timeoutDue {
			timeoutAt = time.Time{}
		}
		if overrunDue {
			overrunAt = time.Time{}
		}
		// Re-armed before renewing: the period runs start to start, and a
		// test that saw the renewal knows the next one is armed.
		if next := earliest(renewAt, timeoutAt, overrunAt); !next.IsZero() {
			watch.Reset(next.Sub(now))
		}
		if timeoutDue {
			cancel(errTimeout)
		}
		if overrunDue {
			overrun = true
			s.log.Warn("run overran its expected runtime; the lock is kept by renewal",
				slog.String("schedule", def.ID), slog.String("tick", f.tick.Format(time.RFC3339)),
				slog.Duration("expected_runtime", def.ExpectedRuntime), slog.Int64("fence", fence))
		}
		if renewDue {
			if err := s.renew(h, every); err != nil {
				// Never renew again nor re-acquire: another node may hold
				// the lock now, so the job must stop at once.
				s.log.Error("lock lost during the run: cancelling the job", slog.String("schedule", def.ID),
					slog.String("tick", f.tick.Format(time.RFC3339)), slog.Int64("fence", fence),
					slog.Any("error", err))
				cancel(fmt.Errorf("%w: %w", errLockLost, err))
				renewAt = time.Time{}
			}
		}
	}
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
