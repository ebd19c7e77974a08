package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Duration anomalies and the last-success gauge come from run records:
// a success under min_runtime is too_fast, a run over its
// expected runtime an overrun; the gauge is the end of this node's last
// success, and absent before one (no false "stale" on a fresh deploy).
func TestAnomaliesAndLastSuccess(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, build)
	m.AddSchedule("backup")
	m.SetMinRuntime("backup", 5*time.Second)
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	anomaly := func(kind string) float64 {
		return value(t, reg, "bext_scheduler_run_anomalies_total", map[string]string{"schedule": "backup", "kind": kind})
	}

	if n := testutil.CollectAndCount(reg, "bext_scheduler_last_success_timestamp_seconds"); n != 0 {
		t.Fatalf("%d last-success series before any run, want none (absent, not 0)", n)
	}
	if anomaly(AnomalyTooFast) != 0 || anomaly(AnomalyOverrun) != 0 {
		t.Fatal("anomaly series not created at zero")
	}

	rec := func(res scheduler.RunResult, d time.Duration, overrun bool) {
		m.RunRecorded(scheduler.RunRecord{Schedule: "backup", Result: res, Start: start, Duration: d, Overrun: overrun, Attempts: 1})
	}
	rec(scheduler.ResultSuccess, 40*time.Millisecond, false) // too fast
	rec(scheduler.ResultFailure, time.Millisecond, false)    // fast, but failed: not an anomaly of duration
	rec(scheduler.ResultSuccess, 5*time.Second, false)       // exactly min_runtime: fine
	rec(scheduler.ResultTimeout, time.Hour, true)            // overrun
	if got := anomaly(AnomalyTooFast); got != 1 {
		t.Errorf("too_fast = %v, want 1", got)
	}
	if got := anomaly(AnomalyOverrun); got != 1 {
		t.Errorf("overrun = %v, want 1", got)
	}
	want := float64(start.Add(5*time.Second).UnixNano()) / 1e9
	if got := value(t, reg, "bext_scheduler_last_success_timestamp_seconds", map[string]string{"schedule": "backup"}); got != want {
		t.Errorf("last success = %v, want %v (the end of the last success, not of the timeout)", got, want)
	}

	m.SetMinRuntime("backup", 0) // removed on reload
	rec(scheduler.ResultSuccess, time.Millisecond, false)
	if got := anomaly(AnomalyTooFast); got != 1 {
		t.Errorf("too_fast = %v after min_runtime was removed, want still 1", got)
	}
}
