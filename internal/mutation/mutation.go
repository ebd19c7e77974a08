// Package mutation names the deliberate bugs ("mutations") that the
// simulation's TestMutations (internal/sim, build tag simmut) plants in the
// production code, one at a time, to prove that each invariant it checks
// catches the bug it is there for ("proof that it bites").
//
// Each mutation is one line at its site in the production code:
//
//	if mutation.On(mutation.NoResend) { return false } // mutation: …
//
// Without the simmut build tag (every production build), On is a constant
// false function the compiler inlines, and the dead branch is removed: the
// hooks cost nothing and cannot be switched on. With the tag, Set chooses
// the mutation that is active (at most one).
package mutation

// Name is one mutation.
type Name string

// The mutations, each with the invariant of internal/sim/check.go it must
// break.
const (
	// IgnoreMark: locking.DecideTick decides as if the key had no mark and
	// no earlier tick had been claimed (invariant 1: a tick runs twice).
	IgnoreMark Name = "decide-tick-ignores-mark"
	// NoResend: a try-lock-tick whose answer was lost is not resent
	// (scheduler/resend.go; invariant 2: a grant is lost).
	NoResend Name = "no-resend-after-timeout"
	// ReleaseDeferred: the release of a run's lock waits until past the
	// schedule's next tick and its catch-up window (scheduler/release.go;
	// invariant 3: the next tick runs nowhere).
	ReleaseDeferred Name = "release-deferred-past-next-tick"
	// PauseOutsideStep: the memory backend decides with the pause flag it
	// read at the key's previous try-lock-tick, not inside this one's
	// atomic step (locking/memory; invariant 6b: a grant while paused).
	PauseOutsideStep Name = "pause-read-outside-atomic-step"
	// NoLeaseTimer: the run's watch never cancels a job at its lease
	// deadline (scheduler/run.go; invariant 5: a job runs past its lease).
	NoLeaseTimer Name = "lease-deadline-timer-removed"
	// NoHistory: a run that did not succeed is not written to history
	// (scheduler/record.go; invariant 7).
	NoHistory Name = "failed-run-not-in-history"
	// NoFenceFloor: the memory backend draws a fence as its counter plus
	// one, without the clock floor (locking/memory; invariant 4, once the
	// counter was lost).
	NoFenceFloor Name = "fence-floor-removed"
	// NoSkipRecords: no tick consumed without a run is written to history
	// as skipped (scheduler/record.go; invariant 8: the audit finds a tick
	// lost).
	NoSkipRecords Name = "skip-records-dropped"
)

// All lists every mutation, in the order TestMutations runs them.
var All = []Name{IgnoreMark, NoResend, ReleaseDeferred, PauseOutsideStep, NoLeaseTimer, NoHistory, NoFenceFloor, NoSkipRecords}
