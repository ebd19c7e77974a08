// Package scheduler is bext-scheduler's tick engine: it turns cron specs
// into fire times, fires them from one timer loop, and for every fired tick
// decides whether and how the job runs on this node.
//
// Where to look:
//
//   - tick.go: a tick's life, steps 1 to 8 of DESIGN.md ("A tick's life"):
//     overlap, hint, lock, jitter, run, claim, outcome. Start here.
//   - resend.go: step 4's request sent again, same token, when its answer
//     did not decide it; a grant that comes too late to run.
//   - run.go: running the job under its lock (renewal, timeout, overrun, panics).
//   - claim.go: why and how a lock outlives its run by the clock-skew tolerance.
//   - loop.go: Run, the firing loop over a heap of fire times, graceful stop.
//   - pool.go: the workers that carry fired ticks, so none waits for another.
//   - heap.go: that heap (O(log n) per fire, never a scan of all schedules).
//   - scheduler.go: the API (Options, Schedule, New, Reload, Snapshot).
//   - clock.go: the injected clock; scheduler/fakeclock drives it in tests.
//   - spec.go: cron expressions (robfig/cron/v3), epoch-aligned @every.
package scheduler
