package ops

import (
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// FailureStreak counts a schedule's failed runs in a row: of runs (newest
// first, as history gives them), the failures (failure, timeout) before
// the newest run that did not fail, counting only runs that started after
// since (the zero time: all). A record that is not a finished run (the
// provisional record of a run still going, a tick not run) is passed over:
// it neither counts nor ends the streak; a success ends it, and so does a
// run that neither failed nor succeeded (lock_lost, cancelled: the job did
// not get to fail on its own). It is the one count status shows as
// failures_in_a_row and pause_after_failures acts on.
func FailureStreak(runs []cluster.Run, since time.Time) int {
	n := 0
	for _, r := range runs {
		if !r.StartedAt.After(since) {
			break // newest first: every later one started before since too
		}
		switch scheduler.RunResult(r.Result) {
		case cluster.ResultRunning, scheduler.ResultNotRun:
			continue
		case scheduler.ResultFailure, scheduler.ResultTimeout:
			n++
		default:
			return n
		}
	}
	return n
}

// lastSuccess returns the tick of the newest successful run of runs
// (newest first), nil when none.
func lastSuccess(runs []cluster.Run) *time.Time {
	for _, r := range runs {
		if r.Result == string(scheduler.ResultSuccess) {
			t := r.Tick.UTC()
			return &t
		}
	}
	return nil
}
