package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A run's watch (renewal, overrun) fires on a goroutine of its own and is
// reused by the next run once stopped. Here, on the real clock, each job
// ends within a couple of milliseconds of its first renewal, so the two
// race, run after run; under -race that reuse must be safe, every run must
// see its overrun, and no renewal may fail (a renewal after the release,
// or of another run's handle, would). The lock table's clock stands still,
// so no lease ever runs out, however late a loaded machine runs a renewal:
// a failed renewal can only be the watch's fault.
func TestWatchFiresRacingTheEndOfRuns(t *testing.T) {
	const want = 60
	rec := newRecorder()
	var n atomic.Int64
	job := scheduler.JobFunc(func(ctx context.Context, _ scheduler.Tick) error {
		// 8 to 12ms: around the renewal at 10ms.
		d := 8*time.Millisecond + time.Duration(n.Add(1)%5)*time.Millisecond
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	const period = int64(30 * time.Millisecond)
	scheds := []scheduler.Schedule{
		{ID: "locked", Spec: stepSpec{period, 0}, Hint: hints.RequireGlobal,
			ExpectedRuntime: 30 * time.Millisecond, Job: job},
		{ID: "local", Spec: stepSpec{period, period / 2}, Hint: hints.NodeLocal,
			ExpectedRuntime: 30 * time.Millisecond, Job: job},
	}
	// TTL = 30ms + 10ms; the usable lease is 30ms, renewed every 10ms.
	// The skew tolerance is an hour: the lock table's clock stands still
	// while the scheduler's runs on, and must not refuse its ticks.
	frozen := time.Now()
	locker := &renewCounter{Locker: memory.New(memory.WithClock(func() time.Time { return frozen }))}
	s, err := scheduler.New(scheduler.Options{NodeID: "n", Locker: locker, Backend: hints.Local,
		SafetyMargin: 10 * time.Millisecond, MaxClockSkew: time.Hour, Observer: rec}, scheds)
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, s)
	runs := rec.waitRuns(t, want)
	stop()
	runs = runs[:want]
	// A run may lose its lease when the loaded machine runs a renewal more
	// than 20ms late (the lease, read on the real boot clock, is 30ms):
	// that is the lease doing its job. What the watch must never do is
	// renew a released or foreign handle, which the backend refuses.
	lost := 0
	for _, r := range runs {
		switch r.result {
		case scheduler.ResultSuccess:
		case scheduler.ResultLockLost:
			lost++
		default:
			t.Fatalf("run %+v: want success", r)
		}
	}
	if f := locker.failed.Load(); f > 0 {
		t.Fatalf("%d renewals refused by the backend: the watch renewed a handle it no longer held", f)
	}
	if lost > want/10 {
		t.Fatalf("%d of %d runs lost their lease with no renewal refused", lost, want)
	}
	// The locked schedule's runs are there, not only the local one's.
	locked := 0
	for _, r := range runs {
		if r.id == "locked" {
			locked++
		}
	}
	if locked < want/4 {
		t.Errorf("only %d of %d runs were of the locked schedule", locked, want)
	}
	// Jobs of 11 and 12ms outlive the renewal at 10ms: without renewals
	// the test would race nothing.
	if n := locker.renews.Load(); n == 0 {
		t.Error("no run was renewed: the watch never fired during a run")
	}
}

// renewCounter counts Renew calls.
type renewCounter struct {
	scheduler.Locker
	renews atomic.Int64
	failed atomic.Int64 // renewals the backend refused
}

func (r *renewCounter) Renew(ctx context.Context, h *locking.Handle) error {
	r.renews.Add(1)
	err := r.Locker.Renew(ctx, h)
	if err != nil && ctx.Err() == nil {
		r.failed.Add(1)
	}
	return err
}
