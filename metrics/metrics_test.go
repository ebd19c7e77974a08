package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var build = BuildInfo{Version: "v1.2.3", Commit: "abc123", GoVersion: "go1.26.8"}

// newFakeClock is the scheduler's fake clock, which tests move by hand.
func newFakeClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
}

// histogram returns the sample count and sum of one histogram series.
func histogram(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("no %s series with labels %v", name, labels)
	return 0, 0
}

// value is the value of the counter or gauge series of name with exactly
// these labels; the test fails when there is none.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
			t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
		}
	}
	t.Fatalf("no %s series with labels %v", name, labels)
	return 0
}

func TestContractMetricsAndLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, build)
	m.AddSchedule("nightly")
	m.NextTick("nightly", time.Unix(1_800_000_000, 0))
	InstrumentLocker(memory.New(), "memory", m)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	want := map[string]string{
		"bext_scheduler_ticks_total":                 "counter",
		"bext_scheduler_ticks_skipped_total":         "counter",
		"bext_scheduler_runs_total":                  "counter",
		"bext_scheduler_run_duration_seconds":        "histogram",
		"bext_scheduler_tick_lateness_seconds":       "histogram",
		"bext_scheduler_next_tick_timestamp_seconds": "gauge",
		"bext_scheduler_overruns_total":              "counter",
		"bext_scheduler_run_anomalies_total":         "counter",
		"bext_locking_operations_total":              "counter",
		"bext_locking_operation_duration_seconds":    "histogram",
		"bext_locking_held_locks":                    "gauge",
		"bext_scheduler_build_info":                  "gauge",
		"bext_notify_dropped_total":                  "counter",
		"go_goroutines":                              "gauge",
		"process_start_time_seconds":                 "gauge",
	}
	for name, typ := range want {
		if types[name] != typ {
			t.Errorf("%s: type %q, want %q", name, types[name], typ)
		}
	}

	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg, build)
	const want = `
# HELP bext_scheduler_build_info Always 1; the labels say which build runs.
# TYPE bext_scheduler_build_info gauge
bext_scheduler_build_info{commit="abc123",goversion="go1.26.8",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bext_scheduler_build_info"); err != nil {
		t.Error(err)
	}
}

func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := New(reg, build)
	b := New(reg, build) // must not panic: the collectors are shared
	a.TickFired("s", time.Time{}, 0)
	b.TickFired("s", time.Time{}, 0)
	if got := value(t, reg, "bext_scheduler_ticks_total", map[string]string{"schedule": "s"}); got != 2 {
		t.Errorf("the registry sees %v ticks, want both Metrics' 2", got)
	}
}

func TestAddSchedulePreinitialises(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, build)
	m.AddSchedule("nightly")
	const want = `
# HELP bext_scheduler_ticks_skipped_total Fired ticks this node did not run, per schedule and reason (contended, backend_error, still_running, paused, missed, group_full).
# TYPE bext_scheduler_ticks_skipped_total counter
bext_scheduler_ticks_skipped_total{reason="backend_error",schedule="nightly"} 0
bext_scheduler_ticks_skipped_total{reason="contended",schedule="nightly"} 0
bext_scheduler_ticks_skipped_total{reason="group_full",schedule="nightly"} 0
bext_scheduler_ticks_skipped_total{reason="missed",schedule="nightly"} 0
bext_scheduler_ticks_skipped_total{reason="paused",schedule="nightly"} 0
bext_scheduler_ticks_skipped_total{reason="still_running",schedule="nightly"} 0
# HELP bext_scheduler_runs_total Job runs finished on this node, per schedule and result (success, failure, timeout, lock_lost, cancelled, replaced).
# TYPE bext_scheduler_runs_total counter
bext_scheduler_runs_total{result="cancelled",schedule="nightly"} 0
bext_scheduler_runs_total{result="failure",schedule="nightly"} 0
bext_scheduler_runs_total{result="lock_lost",schedule="nightly"} 0
bext_scheduler_runs_total{result="replaced",schedule="nightly"} 0
bext_scheduler_runs_total{result="success",schedule="nightly"} 0
bext_scheduler_runs_total{result="timeout",schedule="nightly"} 0
# HELP bext_scheduler_ticks_total Ticks fired by this node, per schedule.
# TYPE bext_scheduler_ticks_total counter
bext_scheduler_ticks_total{schedule="nightly"} 0
# HELP bext_scheduler_overruns_total Job runs that took longer than the schedule's expected_runtime.
# TYPE bext_scheduler_overruns_total counter
bext_scheduler_overruns_total{schedule="nightly"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"bext_scheduler_ticks_skipped_total", "bext_scheduler_runs_total",
		"bext_scheduler_ticks_total", "bext_scheduler_overruns_total"); err != nil {
		t.Error(err)
	}
}

func TestObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, build)
	tick := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

	t.Run("TickFired", func(t *testing.T) {
		m.TickFired("a", tick, 250*time.Millisecond)
		m.TickFired("a", tick, -time.Second) // a clock step back: counted as on time
		if got := value(t, reg, "bext_scheduler_ticks_total", map[string]string{"schedule": "a"}); got != 2 {
			t.Errorf("ticks_total = %v, want 2", got)
		}
		n, sum := histogram(t, reg, "bext_scheduler_tick_lateness_seconds", map[string]string{"schedule": "a"})
		if n != 2 || sum != 0.25 {
			t.Errorf("lateness count %d sum %v, want 2 and 0.25", n, sum)
		}
	})
	t.Run("TickSkipped", func(t *testing.T) {
		m.TickSkipped("a", tick, scheduler.SkipContended)
		m.TickSkipped("a", tick, scheduler.SkipContended)
		m.TickSkipped("a", tick, scheduler.SkipBackendError)
		for reason, want := range map[scheduler.SkipReason]float64{
			scheduler.SkipContended: 2, scheduler.SkipBackendError: 1, scheduler.SkipStillRunning: 0,
		} {
			if got := value(t, reg, "bext_scheduler_ticks_skipped_total", map[string]string{"schedule": "a", "reason": string(reason)}); got != want {
				t.Errorf("skipped{%s} = %v, want %v", reason, got, want)
			}
		}
	})
	t.Run("RunFinished", func(t *testing.T) {
		m.RunFinished("a", tick, scheduler.ResultSuccess, 2*time.Second, false)
		m.RunFinished("a", tick, scheduler.ResultTimeout, 3*time.Second, true)
		m.RunFinished("a", tick, scheduler.ResultLockLost, time.Second, true)
		for result, want := range map[scheduler.RunResult]float64{
			scheduler.ResultSuccess: 1, scheduler.ResultTimeout: 1, scheduler.ResultLockLost: 1, scheduler.ResultFailure: 0,
		} {
			if got := value(t, reg, "bext_scheduler_runs_total", map[string]string{"schedule": "a", "result": string(result)}); got != want {
				t.Errorf("runs{%s} = %v, want %v", result, got, want)
			}
		}
		if got := value(t, reg, "bext_scheduler_overruns_total", map[string]string{"schedule": "a"}); got != 2 {
			t.Errorf("overruns = %v, want 2", got)
		}
		n, sum := histogram(t, reg, "bext_scheduler_run_duration_seconds", map[string]string{"schedule": "a"})
		if n != 3 || sum != 6 {
			t.Errorf("run duration count %d sum %v, want 3 and 6", n, sum)
		}
	})
	t.Run("NextTick", func(t *testing.T) {
		next := time.Date(2026, 12, 1, 3, 0, 0, 500_000_000, time.UTC)
		m.NextTick("a", next)
		m.NextTick("b", next)
		if got, want := value(t, reg, "bext_scheduler_next_tick_timestamp_seconds", map[string]string{"schedule": "a"}), float64(next.Unix())+0.5; got != want {
			t.Errorf("next tick = %v, want %v", got, want)
		}
		m.NextTick("a", time.Time{}) // schedule removed
		if n := testutil.CollectAndCount(reg, "bext_scheduler_next_tick_timestamp_seconds"); n != 1 {
			t.Errorf("%d next-tick series after removing a, want only b's", n)
		}
	})
}

// Drops are counted per kind, and both kinds are there at 0 before the
// first drop (an alert's rate() needs the series).
func TestNotifyDropped(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, build)
	if v := value(t, reg, "bext_notify_dropped_total", map[string]string{"kind": NotifyNotification}); v != 0 {
		t.Errorf("notification drops %v before any, want 0", v)
	}
	m.NotifyDropped(NotifyPing)
	m.NotifyDropped(NotifyPing)
	m.NotifyDropped(NotifyNotification)
	for kind, want := range map[string]float64{NotifyPing: 2, NotifyNotification: 1} {
		if v := value(t, reg, "bext_notify_dropped_total", map[string]string{"kind": kind}); v != want {
			t.Errorf("kind=%s: %v drops, want %v", kind, v, want)
		}
	}
}
