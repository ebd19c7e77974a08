package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// gateJob is a job whose every run blocks until the test lets that run
// go: each start hands the test its tick and its gate.
type gateJob struct{ starts chan gateRun }

type gateRun struct {
	tick scheduler.Tick
	gate chan struct{}
}

func newGateJob() *gateJob { return &gateJob{starts: make(chan gateRun, 16)} }

func (j *gateJob) Run(ctx context.Context, t scheduler.Tick) error {
	g := make(chan struct{})
	j.starts <- gateRun{t, g}
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next waits for the next run to start.
func (j *gateJob) next(t *testing.T) gateRun {
	t.Helper()
	select {
	case r := <-j.starts:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("no run started")
	}
	return gateRun{}
}

// none fails if a run started.
func (j *gateJob) none(t *testing.T, when string) {
	t.Helper()
	select {
	case r := <-j.starts:
		t.Fatalf("%s: a run of tick %v started", when, r.tick.Time)
	default:
	}
}

func queued(sc scheduler.Schedule) scheduler.Schedule {
	sc.Overlap = scheduler.OverlapQueue
	sc.ExpectedRuntime = 10 * time.Minute // the first run's lease outlives the test's steps
	sc.CatchupWindow = 5 * time.Minute
	return sc
}

// secondTickDuringFirstRun runs sc (every minute) with a gate job: its
// 00:01 run starts and holds, then 00:02 fires. It returns the harness,
// the job and the first run.
func secondTickDuringFirstRun(t *testing.T, sc scheduler.Schedule) (*harness, *gateJob, gateRun) {
	t.Helper()
	j := newGateJob()
	sc.Job = j
	h := newHarness(t, scheduler.Options{}, sc).start()
	h.loopParked()
	h.clock.Advance(time.Minute) // 00:01 runs
	first := j.next(t)
	h.loopParked()
	h.clock.Advance(time.Minute) // 00:02 fires
	return h, j, first
}

// overlap = "queue", on one node: the tick that fires while the previous
// run goes on waits for it and starts as soon as it ends, with its own
// tick time; a further tick while one waits is skipped as still_running.
// Locked or node-local alike.
func TestQueueRunsTheWaitingTickWhenTheRunEnds(t *testing.T) {
	for _, hint := range []hints.Hint{hints.RequireGlobal, hints.NodeLocal} {
		t.Run(string(hint), func(t *testing.T) {
			h, j, first := secondTickDuringFirstRun(t, queued(sched("q", everyMinute, hint, nil))) // 00:02 waits
			h.loopParked()
			h.clock.Advance(time.Minute) // 00:03 is skipped: 00:02 waits already
			sk := h.rec.waitSkips(t, 1)
			if sk[0].reason != scheduler.SkipStillRunning || !sk[0].tick.Equal(t0.Add(3*time.Minute)) {
				t.Fatalf("skips %+v, want 00:03 still_running", sk)
			}
			j.none(t, "while 00:01 runs")
			close(first.gate)
			second := j.next(t) // at once: no clock step
			if want := t0.Add(2 * time.Minute); !second.tick.Time.Equal(want) {
				t.Fatalf("the waiting run's tick %v, want %v", second.tick.Time, want)
			}
			close(second.gate)
			h.rec.waitRuns(t, 2)
			h.idle()
			if _, sk, _ := h.rec.snapshot(); len(sk) != 1 {
				t.Errorf("skips %+v, want only 00:03's", sk)
			}
		})
	}
}

// overlap = "queue" across nodes: the tick finds the schedule's lock held
// by another node's run (try-lock-tick answers contended). It waits,
// asking again every second, and runs once the lock is free, within its
// catch-up window.
func TestQueueWaitsForAnotherNodesRun(t *testing.T) {
	j := newGateJob()
	h := newHarness(t, scheduler.Options{}, queued(sched("q", everyMinute, hints.RequireGlobal, j))).start()
	held := peerHolds(t, h, "q", time.Hour)
	h.loopParked()
	h.clock.Advance(time.Minute)
	for range 5 { // five tries, contended each
		h.advanceWhenArmed(2, time.Second) // the loop's timer and the waiting tick's
	}
	j.none(t, "while the peer holds the lock")
	if _, sk, _ := h.rec.snapshot(); len(sk) != 0 {
		t.Fatalf("skips %+v while the tick waits", sk)
	}
	if err := h.peer.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	h.advanceWhenArmed(2, time.Second)
	r := j.next(t)
	if !r.tick.Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the run's tick %v, want 00:01", r.tick.Time)
	}
	close(r.gate)
	runs := h.rec.waitRuns(t, 1)
	if runs[0].result != scheduler.ResultSuccess {
		t.Fatalf("run %+v", runs[0])
	}
}

// A waiting tick whose catch-up window ends while the other run goes on
// is skipped as contended, once, and is not asked for again.
func TestQueueGivesUpAtTheWindowsEnd(t *testing.T) {
	j := newGateJob()
	sc := queued(sched("q", "0 * * * *", hints.RequireGlobal, j))
	sc.CatchupWindow = 10 * time.Second
	h := newHarness(t, scheduler.Options{}, sc).start()
	peerHolds(t, h, "q", 2*time.Hour)
	h.loopParked()
	h.clock.Advance(time.Hour)
	for range 10 {
		h.advanceWhenArmed(2, time.Second)
	}
	sk := h.rec.waitSkips(t, 1)
	if sk[0].reason != scheduler.SkipContended && sk[0].reason != scheduler.SkipMissed {
		t.Fatalf("skip %+v, want contended or missed", sk[0])
	}
	h.idle()
	tries, _, _ := h.locker.counts()
	h.clock.Advance(30 * time.Second)
	h.idle()
	if n, _, _ := h.locker.counts(); n != tries {
		t.Errorf("the tick was asked for %d more times after it was skipped", n-tries)
	}
	if _, sk, _ := h.rec.snapshot(); len(sk) != 1 {
		t.Errorf("skips %+v, want one", sk)
	}
	j.none(t, "after the window")
}

// A node stopping while a tick waits ends the wait at once: Run returns
// without the test moving the clock, and the tick is skipped.
func TestQueueWaitEndsAtShutdown(t *testing.T) {
	j := newGateJob()
	h := newHarness(t, scheduler.Options{}, queued(sched("q", everyMinute, hints.RequireGlobal, j))).start()
	peerHolds(t, h, "q", time.Hour)
	h.loopParked()
	h.clock.Advance(time.Minute)
	h.advanceWhenArmed(2, time.Second) // waiting, its second try armed
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return while a tick waited for its schedule's run")
	}
	if sk := h.rec.waitSkips(t, 1); sk[0].reason != scheduler.SkipContended {
		t.Fatalf("skip %+v, want contended", sk[0])
	}
}

func replacing(sc scheduler.Schedule) scheduler.Schedule {
	sc = queued(sc)
	sc.Overlap = scheduler.OverlapReplace
	return sc
}

// overlap = "replace", on one node: the next tick stops the run in
// progress (recorded replaced, not cancelled or failed), waits for its
// lock, and runs at once with its own tick time. Locked or node-local.
func TestReplaceStopsTheRunAndRuns(t *testing.T) {
	for _, hint := range []hints.Hint{hints.RequireGlobal, hints.NodeLocal} {
		t.Run(string(hint), func(t *testing.T) {
			h, j, first := secondTickDuringFirstRun(t, replacing(sched("r", everyMinute, hint, nil))) // 00:02 replaces it
			second := j.next(t)
			if want := t0.Add(2 * time.Minute); !second.tick.Time.Equal(want) {
				t.Fatalf("the replacing run's tick %v, want %v", second.tick.Time, want)
			}
			runs := h.rec.waitRuns(t, 1)
			if runs[0].result != scheduler.ResultReplaced || !runs[0].tick.Equal(first.tick.Time) {
				t.Fatalf("the first run ended %+v, want replaced", runs[0])
			}
			close(second.gate)
			runs = h.rec.waitRuns(t, 2)
			if runs[1].result != scheduler.ResultSuccess {
				t.Fatalf("the replacing run ended %+v", runs[1])
			}
			if _, sk, _ := h.rec.snapshot(); len(sk) != 0 {
				t.Errorf("skips %+v, want none", sk)
			}
		})
	}
}

// overlap = "replace" across nodes: the tick that finds another node's
// run holding the lock asks the cluster to stop it (Options.ReplaceRuns,
// with its schedule and tick), at each try while it waits, and runs once
// the lock is free.
func TestReplaceAsksTheClusterToStopAnotherNodesRun(t *testing.T) {
	j := newGateJob()
	asked := make(chan time.Time, 64)
	opts := scheduler.Options{ReplaceRuns: func(id string, at time.Time) {
		if id == "r" {
			asked <- at
		}
	}}
	h := newHarness(t, opts, replacing(sched("r", everyMinute, hints.RequireGlobal, j))).start()
	held := peerHolds(t, h, "r", time.Hour)
	h.loopParked()
	h.clock.Advance(time.Minute)
	for i := range 2 {
		select {
		case at := <-asked:
			if !at.Equal(t0.Add(time.Minute)) {
				t.Fatalf("replace asked for tick %v, want 00:01", at)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("try %d asked no replace", i+1)
		}
		h.advanceWhenArmed(2, time.Second)
	}
	j.none(t, "while the peer holds the lock")
	if err := h.peer.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	h.advanceWhenArmed(2, time.Second)
	r := j.next(t)
	if !r.tick.Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the run's tick %v, want 00:01", r.tick.Time)
	}
	close(r.gate)
	h.rec.waitRuns(t, 1)
}

// A waiting tick whose tick another node ran meanwhile (its try answered
// done, not contended) stops waiting at once, skipped: it no longer holds
// its schedule's waiting place, so the next tick asks as usual (before,
// it waited on, asking every second, and made every later tick skip
// still_running until its window ended).
func TestQueueWaitEndsWhenTheTickRanElsewhere(t *testing.T) {
	j := newGateJob()
	h := newHarness(t, scheduler.Options{}, queued(sched("q", everyMinute, hints.RequireGlobal, j))).start()
	ctx := context.Background()
	held := peerHolds(t, h, "q", time.Hour)
	h.loopParked()
	h.clock.Advance(time.Minute)       // 00:01 asks, contended: waits
	h.advanceWhenArmed(2, time.Second) // contended again
	armed(t, h, 2)                     // and waiting again
	if err := h.peer.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	ans, err := h.peer.TryLockTick(ctx, locking.TickRequest{Key: "q", Tick: t0.Add(time.Minute), TTL: time.Minute,
		MaxSkew: time.Second, Window: 5 * time.Minute})
	if err != nil || ans.Verdict != locking.TickGranted {
		t.Fatalf("the peer's try-lock-tick of 00:01: %v, %v", ans.Verdict, err)
	}
	if err := h.peer.Release(ctx, ans.Handle); err != nil { // its run ended
		t.Fatal(err)
	}
	h.clock.Advance(time.Second) // answered done
	if sk := h.rec.waitSkips(t, 1); sk[0].reason != scheduler.SkipContended || !sk[0].tick.Equal(t0.Add(time.Minute)) {
		t.Fatalf("skips %+v, want 00:01 contended", sk)
	}
	h.idle()
	tries, _, _ := h.locker.counts()
	h.clock.Advance(10 * time.Second)
	h.idle()
	if n, _, _ := h.locker.counts(); n != tries {
		t.Errorf("00:01 asked %d more times after it was run elsewhere", n-tries)
	}
	h.loopParked()
	h.clock.Advance(50 * time.Second) // 00:02 runs: nothing waits
	r := j.next(t)
	if !r.tick.Time.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("ran %v, want 00:02", r.tick.Time)
	}
	close(r.gate)
	h.rec.waitRuns(t, 1)
}

// armed waits until n timers of h's clock are armed.
func armed(t *testing.T, h *harness, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.clock.BlockUntilArmed(ctx, n); err != nil {
		t.Fatalf("%d timers never armed: %v", n, err)
	}
}

// peerHolds has h's peer (another node) take key for ttl, as a run of
// the schedule there holds it, and returns its handle.
func peerHolds(t *testing.T, h *harness, key string, ttl time.Duration) *locking.Handle {
	t.Helper()
	held, err := h.peer.TryLock(context.Background(), key, ttl)
	if err != nil || held == nil {
		t.Fatalf("the peer's lock of %q: %v, %v", key, held, err)
	}
	return held
}

// A run that ends while the tick waiting for it is not parked yet (its
// try was answered contended and has not come back) still wakes it: the
// tick runs at once, with no clock step, not a queueRetry later. Here the
// try's answer is held until the run it found has wholly ended (only the
// waiting tick still in flight). Before, the end found no timer to stop
// and the tick waited a second for a run that was over.
func TestQueueWakeBeforeParkIsNotLost(t *testing.T) {
	j := newGateJob()
	h := newHarness(t, scheduler.Options{}, queued(sched("q", everyMinute, hints.RequireGlobal, j))).start()
	h.loopParked()
	h.clock.Advance(time.Minute) // 00:01 runs
	first := j.next(t)
	var once sync.Once
	h.locker.mu.Lock()
	h.locker.afterTry = func() {
		once.Do(func() {
			close(first.gate)
			for deadline := time.Now().Add(waitTimeout); h.s.Inflight() > 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("00:01 never ended")
					return
				}
			}
		})
	}
	h.locker.mu.Unlock()
	h.loopParked()
	h.clock.Advance(time.Minute) // 00:02: contended, answered once 00:01 has ended
	second := j.next(t)
	if want := t0.Add(2 * time.Minute); !second.tick.Time.Equal(want) {
		t.Fatalf("the waiting run's tick %v, want %v", second.tick.Time, want)
	}
	close(second.gate)
	h.rec.waitRuns(t, 2)
}
