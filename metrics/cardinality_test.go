package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// With per-schedule histograms off, the two histograms have one series per
// node whatever the number of schedules, and the counters the alerts read
// stay per schedule.
func TestPerScheduleHistogramsOff(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, build, WithPerScheduleHistograms(false))
	for _, id := range []string{"a", "b", "c"} {
		m.AddSchedule(id)
	}
	m.TickFired("a", time.Time{}, 20*time.Millisecond)
	m.TickFired("b", time.Time{}, 40*time.Millisecond)
	m.RunFinished("a", time.Time{}, scheduler.ResultFailure, time.Second, false)

	for name, want := range map[string]int{
		"bext_scheduler_tick_lateness_seconds": 1,
		"bext_scheduler_run_duration_seconds":  1,
		"bext_scheduler_ticks_total":           3,
		"bext_scheduler_runs_total":            3 * len(runResults),
		"bext_scheduler_ticks_skipped_total":   3 * len(skipReasons),
	} {
		if got := testutil.CollectAndCount(reg, name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	if n, sum := histogram(t, reg, "bext_scheduler_tick_lateness_seconds", nil); n != 2 || sum < 0.059 || sum > 0.061 {
		t.Errorf("lateness: %d samples summing to %v, want 2 summing to 0.06", n, sum)
	}
	if got := value(t, reg, "bext_scheduler_runs_total", map[string]string{"schedule": "a", "result": string(scheduler.ResultFailure)}); got != 1 {
		t.Errorf("runs_total{a,failure} = %v, want 1", got)
	}
}

// The default keeps a series per schedule.
func TestPerScheduleHistogramsDefault(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, build)
	m.AddSchedule("a")
	m.AddSchedule("b")
	if got := testutil.CollectAndCount(reg, "bext_scheduler_tick_lateness_seconds"); got != 2 {
		t.Errorf("lateness: %d series, want 2", got)
	}
}
