package scheduler_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

func grouped(sc scheduler.Schedule, group string, k int, wait bool) scheduler.Schedule {
	sc.Group, sc.GroupMax, sc.GroupWait = group, k, wait
	return sc
}

// twoInAGroupOfOne runs a and b, schedules of hint and expr (expected
// runtime expected) in group "etl" of max_running 1, moves the clock to
// their first tick (step on) and returns the harness, the job that started
// and the other.
func twoInAGroupOfOne(t *testing.T, hint hints.Hint, expr string, expected, step time.Duration, wait bool) (h *harness, first, second *blockingJob) {
	t.Helper()
	a, b := newBlockingJob(), newBlockingJob()
	mk := func(id string, j *blockingJob) scheduler.Schedule {
		sc := grouped(sched(id, expr, hint, j), "etl", 1, wait)
		sc.ExpectedRuntime = expected
		return sc
	}
	h = newHarness(t, scheduler.Options{}, mk("a", a), mk("b", b)).start()
	h.loopParked()
	h.clock.Advance(step)
	select {
	case <-a.started:
		return h, a, b
	case <-b.started:
		return h, b, a
	case <-time.After(waitTimeout):
		t.Fatal("neither job started")
	}
	return nil, nil, nil
}

// driveUntilStarted moves h's clock a quarter of the slot retry at a time
// until j starts (a waiting tick tries every slotRetry), and returns its
// tick; fails past limit on h's clock.
func driveUntilStarted(t *testing.T, h *harness, j *blockingJob, limit time.Time) scheduler.Tick {
	t.Helper()
	for {
		select {
		case tk := <-j.started:
			return tk
		case <-time.After(50 * time.Millisecond):
			if h.clock.Now().After(limit) {
				t.Fatal("the waiting tick never started after the slot was freed")
			}
			h.clock.Advance(slotRetryForTest / 4)
		}
	}
}

// Two schedules of a group of one, due at the same tick, locked or
// node-local (each node's copy takes a slot): one runs, holding slot 0,
// the other is skipped group_full; the slot is released with the run.
func TestGroupFullSkips(t *testing.T) {
	for _, hint := range []hints.Hint{hints.RequireGlobal, hints.NodeLocal} {
		t.Run(string(hint), func(t *testing.T) {
			h, running, _ := twoInAGroupOfOne(t, hint, everyMinute, time.Second, time.Minute, false)
			if sk := h.rec.waitSkips(t, 1); sk[0].reason != scheduler.SkipGroupFull {
				t.Fatalf("skip %+v, want group_full", sk[0])
			}
			if who := h.heldBy(locking.SlotKey("etl", 0)); who == "" {
				t.Error("the running job holds no slot")
			}
			close(running.release)
			if err := running.waitEnded(t); err != nil {
				t.Fatalf("the run ended by %v", err)
			}
			h.rec.waitRuns(t, 1)
			h.idle()
			if who := h.heldBy(locking.SlotKey("etl", 0)); who != "" {
				t.Errorf("the slot is held by %q after the run", who)
			}
		})
	}
}

// With group_wait, the tick that found the group full waits for the slot,
// holding its lock, and runs once the other run ended, within its window.
func TestGroupWaitRunsWhenASlotFrees(t *testing.T) {
	h, first, second := twoInAGroupOfOne(t, hints.RequireGlobal, "0 * * * *", time.Minute, time.Hour, true)
	// The loop's timer, the run's watch, the waiter's wait and renewal.
	h.advanceWhenArmed(4, 5*time.Second)
	h.advanceWhenArmed(4, 5*time.Second)
	select {
	case <-second.started:
		t.Fatal("both jobs of a group of one run at once")
	default:
	}
	if _, skipped, _ := h.rec.snapshot(); len(skipped) != 0 {
		t.Fatalf("skips %+v: the second tick should wait", skipped)
	}
	close(first.release)
	first.waitEnded(t)
	h.rec.waitRuns(t, 1) // reported after its slot was released
	tk := driveUntilStarted(t, h, second, t0.Add(time.Hour+time.Minute))
	if !tk.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("the waiting run's tick %v, want 01:00", tk.Time)
	}
	close(second.release)
	second.waitEnded(t)
}

// slotRetryForTest is the scheduler's retry period of a waiting tick
// (group.go's slotRetry).
const slotRetryForTest = time.Second

// A slot is renewed with the lock: a run far longer than the TTL keeps
// its slot, and another node finds the group full all along.
func TestGroupSlotRenewedWithTheLock(t *testing.T) {
	j := newBlockingJob()
	s := grouped(sched("long", "0 * * * *", hints.RequireGlobal, j), "etl", 1, false)
	s.ExpectedRuntime = 30 * time.Second // TTL 35s, renewed every 10s
	h := newHarness(t, scheduler.Options{}, s).start()
	h.loopParked()
	h.clock.Advance(time.Hour)
	j.waitStarted(t)
	for i := range 12 {
		// Two minutes in all, the TTL over three times: each 10s period
		// renews the lock and then the slot (two Renew calls).
		_, before, _ := h.locker.counts()
		h.advanceWhenArmed(1, 10*time.Second)
		h.locker.wait(t, "the lock's and the slot's renewals", func() bool {
			_, n, _ := h.locker.counts()
			return n >= before+2
		})
		if sh, _, err := locking.TryLockSlot(context.Background(), h.peer, "etl", 1, 0, time.Minute); err != nil || sh != nil {
			t.Fatalf("period %d: another node took the group's only slot during the run: %v, %v", i, sh, err)
		}
	}
	close(j.release)
	if err := j.waitEnded(t); err != nil {
		t.Fatalf("the run ended by %v", err)
	}
}

// A group without a backend, or with a count out of range, is refused.
func TestGroupInvalid(t *testing.T) {
	job := &countingJob{}
	for _, tc := range []struct {
		name string
		opts scheduler.Options
		sc   scheduler.Schedule
	}{
		{"no backend", scheduler.Options{Backend: hints.None, Locker: nil}, grouped(sched("g", everyMinute, hints.NodeLocal, job), "etl", 1, false)},
		{"zero", scheduler.Options{}, grouped(sched("g", everyMinute, hints.RequireGlobal, job), "etl", 0, false)},
		{"wait without group", scheduler.Options{}, grouped(sched("g", everyMinute, hints.RequireGlobal, job), "", 0, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no backend" {
				_, err := scheduler.New(scheduler.Options{}, []scheduler.Schedule{tc.sc})
				if !errors.Is(err, scheduler.ErrInvalid) {
					t.Fatalf("New = %v, want ErrInvalid", err)
				}
				return
			}
			h := newHarness(t, tc.opts)
			if err := h.s.Reload([]scheduler.Schedule{tc.sc}); !errors.Is(err, scheduler.ErrInvalid) {
				t.Fatalf("Reload = %v, want ErrInvalid", err)
			}
		})
	}
}

// A tick waiting for a slot longer than its lease keeps its lock: it
// renews while it waits, whatever its renewal period against the 1s
// retry (here 10s), and does not give up within its window. (It gave up
// backend_error at the lease deadline: waitHoldingLock's renewal timer
// restarted with every 1s wait and never fired.)
func TestGroupWaitOutlivesItsLease(t *testing.T) {
	h, first, second := twoInAGroupOfOne(t, hints.RequireGlobal, "0 * * * *", 30*time.Second, time.Hour, true)
	// Two minutes, the lease four times over, one retry period at a time:
	// each step waits for the waiter's next try (told by the locker's
	// count), or moves the clock again when the waiter armed its wait
	// after the step (then no try comes until the next one).
	for end := h.clock.Now().Add(2 * time.Minute); h.clock.Now().Before(end); {
		before := h.locker.tryLocks()
		h.clock.Advance(slotRetryForTest)
		for deadline := time.Now().Add(100 * time.Millisecond); h.locker.tryLocks() == before && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		if _, skipped, _ := h.rec.snapshot(); len(skipped) != 0 {
			t.Fatalf("at +%v: skips %+v: the waiting tick gave up within its 1h window", h.clock.Now().Sub(t0.Add(time.Hour)), skipped)
		}
	}
	close(first.release)
	first.waitEnded(t)
	h.rec.waitRuns(t, 1)
	// The slot is free: the waiter's next try takes it and its job starts
	// on a fresh lease (renewed at the take), so its watch's first renewal
	// comes before the lease deadline.
	driveUntilStarted(t, h, second, h.clock.Now().Add(time.Minute))
	for range 12 {
		h.advanceWhenRenewed(2, 5*time.Second) // the loop's timer, the run's watch
	}
	select {
	case err := <-second.ended:
		t.Fatalf("the run that waited for its slot was ended by %v a minute in; its lease is renewed", err)
	default:
	}
	close(second.release)
	if err := second.waitEnded(t); err != nil {
		t.Fatalf("the run ended by %v", err)
	}
}

// Schedules of one group must agree on its count.
func TestGroupOneCount(t *testing.T) {
	job := &countingJob{}
	_, err := scheduler.New(scheduler.Options{Locker: newHarness(t, scheduler.Options{}).locker, Backend: hints.Distributed},
		[]scheduler.Schedule{
			grouped(sched("a", everyMinute, hints.RequireGlobal, job), "etl", 1, false),
			grouped(sched("b", everyMinute, hints.RequireGlobal, job), "etl", 3, false),
		})
	if !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("New = %v, want ErrInvalid (two counts for one group)", err)
	}
}
