package scheduler

import (
	"testing"
	"time"
)

// Every skip reason and run result survives lastOutcome's compact form, so
// Snapshot (the API, the page, `bext-scheduler status`) reports what
// happened; a reason missing from the lists would read as "ran" or as no
// result at all.
func TestLastOutcomeKeepsEveryReason(t *testing.T) {
	for _, r := range []SkipReason{SkipContended, SkipBackendError, SkipStillRunning, SkipPaused, SkipMissed} {
		i := indexOf(skipReasons[:], r)
		if i == 0 || skipReasons[i] != r {
			t.Errorf("skip reason %q kept as %q", r, skipReasons[i])
		}
	}
	for _, r := range []RunResult{ResultSuccess, ResultFailure, ResultTimeout, ResultLockLost, ResultCancelled, ResultReplaced} {
		i := indexOf(runResults[:], r)
		if i == 0 || runResults[i] != r {
			t.Errorf("run result %q kept as %q", r, runResults[i])
		}
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Date(2026, 3, 29, 3, 0, 0, 0, paris) // just after a DST change
	got := timeOrZero(unixOrZero(tick), paris)
	if !got.Equal(tick) || got.String() != tick.String() {
		t.Errorf("tick %v read back as %v", tick, got)
	}
	if !timeOrZero(unixOrZero(time.Time{}), paris).IsZero() {
		t.Error("the zero time did not stay zero")
	}
}
