package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// tickHookLocker is faulty with a hook that sees each try-lock-tick's
// request before it is asked.
type tickHookLocker struct {
	*faulty
	hook func(req locking.TickRequest)
}

func (l *tickHookLocker) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	l.hook(req)
	return l.faulty.TryLockTick(ctx, req)
}

// waitFaulty waits, off the test's goroutine, until ok holds (re-checked
// at each of f's calls) or waitTimeout passes.
func waitFaulty(f *faulty, ok func() bool) {
	deadline := time.After(waitTimeout)
	for {
		f.cond.mu.Lock()
		if f.cond.ch == nil {
			f.cond.ch = make(chan struct{})
		}
		ch := f.cond.ch
		f.cond.mu.Unlock()
		if ok() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			return
		}
	}
}

// A catch-up try that is granted is a tick granted: it must run, even when
// the schedule's next regular tick fired on this node while the try was
// being answered. The backend fails at 00:01 (backend_error), answers
// again at 00:01:59 and the recovery's catch-up asks for 00:01 (late,
// within its window); the regular tick 00:02 fires before that answer is
// handled. The catch-up was granted (the mark is 00:01: no node will run
// it), so dropping it as "catch-up while a run is going on" loses 00:01;
// the regular tick 00:02 has not even asked yet, so it holds no lock that
// the catch-up's run could overlap.
func TestGrantedCatchUpRunsBesideARegularTickInFlight(t *testing.T) {
	clock := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(clock.Now), memory.WithHolder("node-a"))
	f := &faulty{inner: mem}
	jb := &countingJob{}
	b := sched("b", everyMinute, hints.RequireGlobal, jb)
	b.ExpectedRuntime = 100 * time.Millisecond
	b.CatchupWindow = 5 * time.Minute
	catchUp, tick2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	catchupAsking, regularAsking := make(chan struct{}), make(chan struct{})
	// Closed once each: a request asked again (a retry) must not panic
	// the worker that asks it.
	var catchupOnce, regularOnce sync.Once
	l := &tickHookLocker{faulty: f, hook: func(req locking.TickRequest) {
		f.mu.Lock()
		down := f.tryErr != nil
		f.mu.Unlock()
		switch {
		case req.Tick.Equal(catchUp) && !down:
			// The catch-up's request: decided once the regular tick
			// has fired and is asking.
			catchupOnce.Do(func() { close(catchupAsking) })
			select {
			case <-regularAsking:
			case <-time.After(waitTimeout):
			}
		case req.Tick.Equal(tick2):
			// The regular tick asks once the catch-up's answer was
			// handled: its lock released (dropped, or after its run).
			regularOnce.Do(func() { close(regularAsking) })
			waitFaulty(f, func() bool { _, _, rel := f.counts(); return rel >= 1 })
		}
	}}
	h := newHarness(t, scheduler.Options{Clock: clock, Locker: l, Backend: hints.Distributed}, b).start()

	f.setTryErr(fmt.Errorf("backend down: %w", locking.ErrUnavailable))
	h.step(time.Minute) // 00:01: backend_error
	// Still down until the probe waits on its timer: a probe poked now
	// fails, and re-arms.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.s.WaitProbeArmed(ctx); err != nil {
		t.Fatalf("the recovery probe never armed: %v", err)
	}
	h.loopParked()
	f.setTryErr(nil)
	clock.Advance(59 * time.Second) // the recovery probe: the backend answers, catch-up of 00:01
	select {
	case <-catchupAsking:
	case <-time.After(waitTimeout):
		t.Fatal("the recovery never tried 00:01")
	}
	h.step(time.Second) // 00:02 fires while the catch-up is being answered
	var ran []time.Time
	for _, tk := range jb.got() {
		ran = append(ran, tk.Time)
	}
	if len(ran) == 0 || !ran[0].Equal(catchUp) {
		_, skips, _ := h.rec.snapshot()
		t.Errorf("b ran %v (skips %v), want 00:01 run by its granted catch-up", ran, skips)
	}
}
