// Package scheduler is bext-scheduler's tick engine: it fires the ticks of
// cron specs (package cronspec: parsing, zones, daylight saving, spread)
// from one timer loop, and for every fired tick decides whether and how
// the job runs on this node.
//
// Where to look (docs/DESIGN.md "A tick's life" maps steps 1 to 8 to these
// files; the workers that carry ticks are internal/workpool, the group
// commit of try-lock-ticks and releases internal/batch):
//
//   - tick.go: the tick, one object from fire to end, and its life in order, steps 1 to 8: its state, start (hint, handoff), ask and decide (try-lock-tick and its answer), locked (jitter, run), afterRun (release, report), and end, which keeps every obligation of a tick once. Start here.
//   - loop.go: Run, the firing loop over the heap; step 1's overlap check (popDueLocked); graceful stop.
//   - resend.go: step 4's request sent again with the same token while undecided; late grants, expired grants, ErrGrantUnknown.
//   - batch.go: the try-lock-ticks a backend decides many to a round trip (locking.TickBatcher), through internal/batch's group commit; locking.InProcessLocker.
//   - handoff.go: the handoff: a preferred node per tick (internal/rendezvous ranks the nodes); the others wait handoff_delay per rank.
//   - turns.go: the handoff's waiters share one timer, armed for the earliest end of a wait.
//   - group.go: step 5½: a grouped schedule's slot of its concurrency group's counting lease (locking.TryLockSlot), taken before the run, renewed with the lock, released after it; group_full and group_wait.
//   - run.go: step 6: the job and its retries under the lock; the run's watch (renewal, lease deadline, timeout, overrun).
//   - lease.go: the lease deadline a node trusts its lock until (TTL or MaxLease, minus safety_margin).
//   - release.go: step 7's release, batched (locking.ReleaseBatcher, internal/batch); whether a run's end may wait behind a burst (jobReturned).
//   - catchup.go: catch-up at start, after an outage, after a reload or a manual run; the marks made at load (InitMarks).
//   - manual.go: manual runs (trigger, backfill) from step 6 on, under a lock the caller took.
//   - record.go: step 8's run record for the cluster's history (RunObserver), with the output tail.
//   - observer.go: Observer, SkipReason and RunResult (metric label values).
//   - observers.go: Observers, the fan-out of one Observer to several.
//   - reload.go: Reload (the whole set, SIGHUP), Add and Remove (one schedule).
//   - compile.go: a Schedule checked and compiled (TTL, hint resolved, policy shared); what a reload changed.
//   - scheduler.go: the API (Options, Schedule, Locker, New, Snapshot, LockTTL) and per-schedule state.
//   - job.go: Job, JobFunc and Tick (what a job learns of its tick).
//   - clock.go: the injected Clock; scheduler/fakeclock drives it in tests.
//   - heap.go: the heap of next fire times (O(log n) per fire, never a scan of all schedules).
//   - bootcache.go: the lease clock (CLOCK_BOOTTIME) read without a system call each time.
//   - boottime_linux.go: CLOCK_BOOTTIME, monotonic and counting suspended time.
//   - boottime_other.go: its fallback elsewhere (the monotonic clock).
//   - wake.go: the loop's wake on the wall clock (internal/wallwake: a timerfd on Linux), so a wall-clock jump or a suspend wakes it; elsewhere the loop re-reads the clock every maxSleep.
//   - mutation.go: helpers of the simulation's planted bugs (build tag simmut only).
package scheduler
