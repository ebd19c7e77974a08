package config

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// writeFleet writes what scripts/fleet gen writes: n schedules in the
// main file, or perFile to an included file when perFile > 0.
func writeFleet(tb testing.TB, dir string, n, perFile int) string {
	tb.Helper()
	main := fleetHead
	if perFile > 0 {
		main = "include = [\"inc-*.toml\"]\n" + main
		for first := 0; first < n; first += perFile {
			name := filepath.Join(dir, fmt.Sprintf("inc-%06d.toml", first/perFile))
			if err := os.WriteFile(name, []byte(fleet(min(perFile, n-first), first)), 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	} else {
		main += fleet(n, 0)
	}
	path := filepath.Join(dir, "bext.config.toml")
	if err := os.WriteFile(path, []byte(main), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkLoad100k is config.Load of 100,000 schedules as scripts/fleet
// gen writes them (issue 31: a node holding them is ready in at most 2 s),
// in included files of 1,000 and all in the main file. cpu-ns/op is the
// process's CPU time per load (GC included): on a shared machine other
// processes stretch the wall time, not the CPU time.
func BenchmarkLoad100k(b *testing.B) {
	for _, per := range []int{1000, 0} {
		b.Run(fmt.Sprintf("per_file=%d", per), func(b *testing.B) {
			path := writeFleet(b, b.TempDir(), 100_000, per)
			b.ReportAllocs()
			start := processCPU(b)
			for b.Loop() {
				c, err := Load(path)
				if err != nil {
					b.Fatal(err)
				}
				if len(c.Scheduled) != 100_000 {
					b.Fatalf("%d schedules", len(c.Scheduled))
				}
			}
			b.ReportMetric(float64((processCPU(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
