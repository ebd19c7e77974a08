package scheduler

import "time"

// SkipReason says why a fired tick did not run. Its string values are the
// `reason` label of bext_scheduler_ticks_skipped_total (a contract).
type SkipReason string

// Skip reasons.
const (
	SkipContended    SkipReason = "contended"     // another node holds the lock
	SkipBackendError SkipReason = "backend_error" // the lock backend failed or answered too late
	SkipStillRunning SkipReason = "still_running" // previous run still going, overlap = "skip"
	SkipPaused       SkipReason = "paused"        // the schedule is paused cluster-wide
	SkipMissed       SkipReason = "missed"        // later than its catch-up window
	SkipGroupFull    SkipReason = "group_full"    // its concurrency group ran max_running runs (group.go)
)

// RunResult is how a run ended. Its string values are the `result` label of
// bext_scheduler_runs_total (a contract).
type RunResult string

// Run results.
const (
	ResultSuccess  RunResult = "success"
	ResultFailure  RunResult = "failure"
	ResultTimeout  RunResult = "timeout"
	ResultLockLost RunResult = "lock_lost"
	// ResultCancelled: shutdown's grace ran out and cancelled the job. Not
	// a failure of the job: a rolling restart must not page anyone.
	ResultCancelled RunResult = "cancelled"
	// ResultReplaced: a later tick of its schedule replaced it (overlap =
	// "replace"): cancelled as a stop cancels, and not a failure either.
	ResultReplaced RunResult = "replaced"
	// ResultNotRun: granted too late to run (past its catch-up window, or
	// its lease gone by the time the grant came), so the tick is consumed
	// and ran nowhere. Only in run records (RunObserver), for history:
	// bext_scheduler_runs_total never counts it, the tick is counted
	// skipped.
	ResultNotRun RunResult = "not_run"
)

// Observer receives every tick's outcome. The metrics package implements it;
// tests use it to wait for outcomes instead of sleeping. Implementations
// must be safe for concurrent use and must not block: they are called from
// the firing loop and from run goroutines.
type Observer interface {
	// TickFired: a tick of schedule id, due at tick, was handled by this
	// node `lateness` after it was due.
	TickFired(id string, tick time.Time, lateness time.Duration)
	// TickSkipped: the tick was not run, for reason.
	TickSkipped(id string, tick time.Time, reason SkipReason)
	// RunFinished: the job ran for d and ended with result. overrun is true
	// when it ran longer than the schedule's expected runtime.
	RunFinished(id string, tick time.Time, result RunResult, d time.Duration, overrun bool)
	// NextTick: the schedule's next fire time is next; the zero time means
	// the schedule was removed (so gauges can drop its series).
	NextTick(id string, next time.Time)
}

// ClockObserver is implemented by observers that want this node's clock
// offset against the lock backend's (this node's clock minus the
// backend's), measured on every try-lock-tick.
type ClockObserver interface {
	ClockOffset(d time.Duration)
}

// NopObserver ignores everything.
type NopObserver struct{}

// TickFired does nothing.
func (NopObserver) TickFired(string, time.Time, time.Duration) {}

// TickSkipped does nothing.
func (NopObserver) TickSkipped(string, time.Time, SkipReason) {}

// RunFinished does nothing.
func (NopObserver) RunFinished(string, time.Time, RunResult, time.Duration, bool) {}

// NextTick does nothing.
func (NopObserver) NextTick(string, time.Time) {}
