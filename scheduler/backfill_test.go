package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
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

// A missing mark (a backend that lost its data) counts, in try-lock-tick,
// as the backend's time minus max_clock_skew: a tick after that may still
// be granted to its regular run. The node that takes a backfill cannot
// read the backend's time, only its own clock, which may be ahead of the
// backend's (within the skew, or beyond it): a tick its clock counts as
// decided is not (sim seed 432663: a node 2.4s ahead backfilled a tick the
// backend then granted to the tick's regular run). So a missing mark
// decides nothing: the backfill is refused until a decision stores a mark.
func TestBackfillOnAMissingMarkIsRefused(t *testing.T) {
	job := &countingJob{}
	s := sched("b", "* * * * *", hints.RequireGlobal, job)
	clock := fakeclock.New(t0)
	// The backend's clock is 0.9s behind the node's: within the skew.
	mem := memory.New(memory.WithClock(func() time.Time { return clock.Now().Add(-900 * time.Millisecond) }),
		memory.WithHolder("node-a"))
	h := newHarness(t, scheduler.Options{Clock: clock, Locker: mem, Backend: hints.Distributed, MaxClockSkew: time.Second}, s).start()
	ctx := context.Background()
	h.step(30 * time.Second)
	mem.ForgetMarks("b")
	tick := t0.Add(29 * time.Second) // the node's clock minus the skew: the backend's time minus 0.1s

	lk, err := mem.TryLock(ctx, "b", time.Minute)
	if err != nil || lk == nil {
		t.Fatalf("TryLock: %v, %v", lk, err)
	}
	err = h.s.RunManual(scheduler.Manual{ID: "b", Tick: tick, RunID: "bf", Handle: lk, Sent: clock.Now(), Backfill: true})
	if err == nil {
		h.idle()
	} else if rerr := mem.Release(ctx, lk); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, scheduler.ErrTickUndecided) {
		t.Errorf("a backfill of %s on a missing mark, the backend's clock 0.9s behind the node's: RunManual %v; want %v",
			tick.Format(time.RFC3339Nano), err, scheduler.ErrTickUndecided)
	}
	// The tick is still its regular run's: another node's try-lock-tick
	// is granted it (the backfill's run, had it run, released the lock).
	ans, err := mem.Peer("node-b").TryLockTick(ctx, locking.TickRequest{Key: "b", Tick: tick, TTL: time.Minute, MaxSkew: time.Second})
	if err != nil || ans.Verdict != locking.TickGranted {
		t.Fatalf("another node's try-lock-tick of %s: %+v, %v; want granted", tick.Format(time.RFC3339Nano), ans, err)
	}
}
