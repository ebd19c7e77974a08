package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// A backfill of a tick the schedule has not decided yet (its mark is
// before it) races that tick's regular run: the tick runs once, at its
// time, as the regular tick; the backfill is refused. A backfill asked
// once the tick was decided runs it again, as backfills do.
func TestBackfillRacingTheRegularTickRunsOnce(t *testing.T) {
	job := &countingJob{}
	s := sched("b", "* * * * *", hints.RequireGlobal, job)
	clock := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(clock.Now), memory.WithHolder("node-a"))
	h := newHarness(t, scheduler.Options{Clock: clock, Locker: mem, Backend: hints.Distributed}, s).start()
	ctx := context.Background()
	next := t0.Add(time.Minute)

	// As a node's agent does with a backfill request: the schedule's lock
	// (TakeRequest), then the run; a refused run's lock is given back.
	backfill := func(tick time.Time, runID string) error {
		t.Helper()
		lk, err := mem.TryLock(ctx, "b", time.Minute)
		if err != nil || lk == nil {
			t.Fatalf("TryLock: %v, %v", lk, err)
		}
		err = h.s.RunManual(scheduler.Manual{ID: "b", Tick: tick, RunID: runID, Handle: lk, Sent: clock.Now(), Backfill: true})
		if err != nil {
			if rerr := mem.Release(ctx, lk); rerr != nil {
				t.Fatal(rerr)
			}
		}
		h.idle()
		return err
	}
	runsOf := func(tick time.Time) int {
		n := 0
		for _, tk := range job.got() {
			if tk.Time.Equal(tick) {
				n++
			}
		}
		return n
	}

	err := backfill(next, "early")
	if n := runsOf(next); n != 0 || err == nil {
		t.Errorf("a backfill of %s, not yet decided, ran %d times (RunManual: %v); want refused", next.Format(time.RFC3339), n, err)
	}
	h.loopParked()
	h.step(time.Minute) // the regular tick
	if n := runsOf(next); n != 1 {
		t.Fatalf("tick %s ran %d times with a backfill of it racing; want once", next.Format(time.RFC3339), n)
	}
	// Decided now: a backfill runs it again.
	if err := backfill(next, "again"); err != nil {
		t.Fatalf("a backfill of the decided tick %s: %v", next.Format(time.RFC3339), err)
	}
	if n := runsOf(next); n != 2 {
		t.Errorf("tick %s ran %d times after a backfill of it once decided; want 2 (the regular run, then the backfill)", next.Format(time.RFC3339), n)
	}
}
