package config

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fleet writes n schedules as the operators of a big fleet do: a yearly
// cron in a zone with daylight saving, a command job each.
func fleet(n, first int) string {
	var b strings.Builder
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&b, "[[scheduled]]\nid = \"s%06d\"\ncron = \"0 0 1 1 *\"\ntimezone = \"Europe/Paris\"\ncommand = [\"/bin/true\"]\n", i)
	}
	return b.String()
}

const fleetHead = "node_id = \"n\"\n[locking]\nbackend = \"memory\"\n"

// minTimes times small and large alternately, runs times each, and
// returns the least CPU time of each. CPU time (of this process, GC
// included) rather than wall time: other processes on a loaded machine
// delay a load but do not add to its CPU time. Alternating puts both
// under the same conditions, and a GC before each run keeps one run's
// garbage off the next one's account (and none runs during it).
func minTimes(t *testing.T, runs int, small, large func()) (ts, tl time.Duration) {
	ts, tl = time.Duration(1<<63-1), time.Duration(1<<63-1)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	timed := func(f func()) time.Duration {
		runtime.GC()
		// No collection inside the timed load: whether one starts there
		// depends on where the heap stood, not on the load's algorithm,
		// and one collection (both cores marking) weighed more than a
		// fast load of thousands of schedules (×9 for ×2 once).
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		start := cpu()
		f()
		return cpu() - start
	}
	for range runs {
		ts = min(ts, timed(small))
		tl = min(tl, timed(large))
	}
	return ts, tl
}

// TestLoadScalesLinearly fails when doubling the schedules more than
// triples the load time (it was quadratic: every key's line was found by
// counting the newlines from the start of the file).
func TestLoadScalesLinearly(t *testing.T) {
	if testing.Short() {
		t.Skip("times loads of thousands of schedules")
	}
	oneFile := func(n int) func() {
		data := []byte(fleetHead + fleet(n, 0))
		return func() {
			c, err := Parse(data, "fleet.toml")
			if err != nil || len(c.Scheduled) != n {
				t.Fatalf("Parse: %d schedules, %v", len(c.Scheduled), err)
			}
		}
	}
	included := func(n int) func() {
		dir := t.TempDir()
		const per = 500
		main := filepath.Join(dir, "bext.config.toml")
		if err := os.WriteFile(main, []byte("include = [\"inc-*.toml\"]\n"+fleetHead), 0o600); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i += per {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("inc-%06d.toml", i)), []byte(fleet(per, i)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return func() {
			c, err := Load(main)
			if err != nil || len(c.Scheduled) != n {
				t.Fatalf("Load: %d schedules, %v", len(c.Scheduled), err)
			}
		}
	}
	for name, load := range map[string]func(int) func(){"one file": oneFile, "includes": included} {
		t.Run(name, func(t *testing.T) {
			small, large := load(10000), load(20000)
			small() // warm up: zone data, the schema
			ts, tl := minTimes(t, 5, small, large)
			t.Logf("10,000 schedules: %v; 20,000: %v (×%.2f)", ts, tl, float64(tl)/float64(ts))
			if tl > 3*ts {
				t.Errorf("doubling the schedules multiplied the load time by %.2f (want at most 3): %v → %v", float64(tl)/float64(ts), ts, tl)
			}
		})
	}
}

func TestMetricsHistogramsPerSchedule(t *testing.T) {
	c, err := Parse([]byte(fleetHead+"[metrics]\nper_schedule_histograms = true\n"), "m.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Metrics.HistogramsPerSchedule(1_000_000) {
		t.Error("per_schedule_histograms = true: off at a million schedules")
	}
	var auto Metrics
	if !auto.HistogramsPerSchedule(AutoHistogramSchedules) || auto.HistogramsPerSchedule(AutoHistogramSchedules+1) {
		t.Errorf("unset: want per schedule up to %d schedules, not past it", AutoHistogramSchedules)
	}
	off := false
	if (Metrics{PerScheduleHistograms: &off}).HistogramsPerSchedule(1) {
		t.Error("per_schedule_histograms = false: on at one schedule")
	}
}
