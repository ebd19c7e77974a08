package scheduler_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// fleet is n daily cron schedules spread over the minutes of a day, as a
// config with many schedules gives them (the same few hundred expressions
// repeated).
func fleet(n int) []scheduler.Schedule {
	scheds := make([]scheduler.Schedule, n)
	for i := range scheds {
		scheds[i] = scheduler.Schedule{
			ID: "schedule-" + strconv.Itoa(i), CronExpr: fmt.Sprintf("%d %d * * *", i%60, (i/60)%24),
			Hint: hints.NodeLocal, Job: nopJob,
		}
	}
	return scheds
}

// BenchmarkReloadOneChanged: one Reload of 100,000 running schedules that
// adds or removes one of them (alternately): the cost of a SIGHUP after an
// operator added a job. Target: under 30 ms, and growing with what changed.
func BenchmarkReloadOneChanged(b *testing.B) {
	const n = 100_000
	all := fleet(n + 1)
	s, err := scheduler.New(scheduler.Options{NodeID: "bench", Clock: fakeclock.New(t0)}, all[:n])
	if err != nil {
		b.Fatal(err)
	}
	stop := running(b, s)
	defer stop()
	waitIdle(b, s)
	b.ResetTimer()
	cpu0 := processCPU()
	for i := range b.N {
		set := all[:n+1]
		if i%2 == 1 {
			set = all[:n]
		}
		if err := s.Reload(set); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/reload")
	// CPU (getrusage) says more than wall time on a shared machine.
	b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/reload")
}

// BenchmarkAddRemove: Add then Remove of one schedule beside 100,000
// running ones (one op = both). Target: each under 10 µs.
func BenchmarkAddRemove(b *testing.B) {
	const n = 100_000
	all := fleet(n + 1)
	s, err := scheduler.New(scheduler.Options{NodeID: "bench", Clock: fakeclock.New(t0)}, all[:n])
	if err != nil {
		b.Fatal(err)
	}
	stop := running(b, s)
	defer stop()
	waitIdle(b, s)
	extra := all[n]
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		if err := s.Add(extra); err != nil {
			b.Fatal(err)
		}
		if err := s.Remove(extra.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(2*b.N), "µs/change")
	b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(2*b.N), "cpu-µs/change")
}
