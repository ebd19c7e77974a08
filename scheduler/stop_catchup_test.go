package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A node stopped before it has caught up tries no missed tick: catch-up
// stops when Run's context ends. (At 100,000 schedules finding each one's
// latest tick takes seconds of CPU, and a SIGTERM waited for all of it.)
func TestStopBeforeCatchUpTriesNothing(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		job := &countingJob{}
		hourly := sched("s", "0 * * * *", hints.RequireGlobal, job)
		first := newHarness(t, scheduler.Options{}, hourly).start()
		first.stop()                                    // the mark is created at load
		first.clock.Advance(time.Hour + 10*time.Minute) // 01:00 passes while down, within its window
		h := newHarness(t, scheduler.Options{Locker: first.locker, Backend: hints.Distributed, Clock: first.clock}, hourly)
		if !stopped {
			h.start()
			h.idle()
			if n := len(job.got()); n != 1 {
				t.Fatalf("a running node: %d runs of the missed tick, want 1 (the test's premise)", n)
			}
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // SIGTERM before Run got to its catch-up
		finished := make(chan struct{})
		var err error
		go func() {
			err = h.s.Run(ctx)
			close(finished)
		}()
		drain(t, h.clock, finished)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n := len(job.got()); n != 0 {
			t.Errorf("a stopping node ran the missed tick %d times, want it left for a running node", n)
		}
	}
}
