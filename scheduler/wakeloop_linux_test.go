package scheduler_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// On the real clock the loop sleeps until the kernel wakes it at the
// head's wall time, its timer only a safety net a minute out: a tick due
// in a moment runs on time, so the kernel's wake fired it, and while
// nothing is due for hours the loop does not wake every maxSleep.
func TestLoopWakesOnTheWallClock(t *testing.T) {
	at := time.Now().Add(300 * time.Millisecond)
	ran := make(chan time.Time, 1)
	far := (time.Now().Hour() + 12) % 24
	s, err := scheduler.New(scheduler.Options{NodeID: "wall"}, []scheduler.Schedule{
		{ID: "soon", Spec: onceSpec{at}, Hint: hints.NodeLocal,
			Job: scheduler.JobFunc(func(context.Context, scheduler.Tick) error {
				ran <- time.Now()
				return nil
			})},
		{ID: "far", CronExpr: "0 " + strconv.Itoa(far) + " * * *", Hint: hints.NodeLocal, Job: nopJob},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, s)
	defer stop()
	select {
	case got := <-ran:
		if got.Before(at) {
			t.Fatalf("ran %v before its tick", at.Sub(got))
		}
	case <-time.After(waitTimeout):
		t.Fatal("the tick never ran")
	}
	waitIdle(t, s)
	// The kernel wake is only ever dropped, never taken up again: still
	// in use now, it was in use when the tick came due.
	if in := s.WakeIn(); in <= scheduler.MaxSleep || in > scheduler.WallSafetySleep {
		t.Fatalf("the parked loop wakes in %v; want the safety net (%v), not %v polling",
			in, scheduler.WallSafetySleep, scheduler.MaxSleep)
	}
}

// An injected clock keeps the timer and its maxSleep bound: the fake
// clock's tests step through those wakes.
func TestLoopPollsOnAnInjectedClock(t *testing.T) {
	h := newHarness(t, scheduler.Options{}, sched("daily", "0 12 * * *", hints.NodeLocal, nopJob)).start()
	if in := h.s.WakeIn(); in != scheduler.MaxSleep {
		t.Fatalf("the parked loop wakes in %v, want %v", in, scheduler.MaxSleep)
	}
}
