package scheduler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// A program embedding the scheduler: one nightly Go job under the memory
// lock backend, driven here by a fake clock so the night passes at once.
func Example() {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ran := make(chan scheduler.Tick, 1)
	s, err := scheduler.New(scheduler.Options{
		NodeID: "node-a",
		Locker: memory.New(memory.WithClock(clock.Now)), Backend: hints.Local,
		Clock: clock,
	}, []scheduler.Schedule{{
		ID: "nightly-report", CronExpr: "0 3 * * *", Hint: hints.PreferGlobal,
		Job: scheduler.JobFunc(func(ctx context.Context, t scheduler.Tick) error {
			ran <- t
			return nil
		}),
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()

	_ = clock.BlockUntilArmed(ctx, 1) // Run armed its timer for 03:00
	clock.Advance(3 * time.Hour)
	t := <-ran
	fmt.Println(t.ScheduleID, t.Time.Format(time.RFC3339), t.NodeID, "locked:", t.Locked())

	// The lock was released when the run ended; the tick mark keeps 03:00
	// from running again anywhere.
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// nightly-report 2026-01-01T03:00:00Z node-a locked: true
	// stopped: <nil>
}
