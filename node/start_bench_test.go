package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/node"
)

// writeFleet writes what scripts/fleet gen writes: n schedules ("0 0 1 1
// *" in Europe/Paris, a command job each, memory backend), perFile to an
// included file, or all in the main file when perFile is 0. It returns
// the main file's path.
func writeFleet(b *testing.B, n, perFile int) string {
	b.Helper()
	dir := b.TempDir()
	var main strings.Builder
	main.WriteString("node_id = \"fleet\"\n")
	if perFile > 0 {
		main.WriteString("include = [\"inc-*.toml\"]\n")
	}
	main.WriteString("[http]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n[locking]\nbackend = \"memory\"\n")
	out := &main
	var inc strings.Builder
	flush := func(i int) {
		if inc.Len() == 0 {
			return
		}
		name := filepath.Join(dir, fmt.Sprintf("inc-%06d.toml", i/perFile))
		if err := os.WriteFile(name, []byte(inc.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		inc.Reset()
	}
	for i := range n {
		if perFile > 0 {
			if i%perFile == 0 {
				flush(i - 1)
			}
			out = &inc
		}
		fmt.Fprintf(out, "[[scheduled]]\nid = \"s%06d\"\ncron = \"0 0 1 1 *\"\ntimezone = \"Europe/Paris\"\ncommand = [\"/bin/true\"]\n", i)
	}
	if perFile > 0 {
		flush(n - 1)
	}
	path := filepath.Join(dir, "bext.config.toml")
	if err := os.WriteFile(path, []byte(main.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkStart100k: from config.Load to Ready (the HTTP server
// answering, ticks about to fire) for a node holding 100,000 schedules,
// as scripts/fleet measure times the binary (issue 31: at most 2 s), in
// included files of 1,000 and all in the main file. Each start is
// stopped, untimed, before the next. cpu-ns/op is the process's CPU time
// from Load to Ready: the figure to compare on a busy machine.
// ready-heap-B/schedule is the live heap the node holds once ready, per
// schedule (the RSS scripts/fleet measure reads then, less the binary's
// pages and the runtime's).
func BenchmarkStart100k(b *testing.B) {
	for _, per := range []int{1000, 0} {
		b.Run(fmt.Sprintf("per_file=%d", per), func(b *testing.B) {
			path := writeFleet(b, 100_000, per)
			b.ReportAllocs()
			var cpu time.Duration
			var heap float64
			for b.Loop() {
				b.StopTimer()
				base := liveHeap()
				b.StartTimer()
				start := processCPU(b)
				cfg, err := config.Load(path)
				if err != nil {
					b.Fatal(err)
				}
				n, err := node.New(context.Background(), cfg, node.Options{Logger: quiet, ReleaseSchedules: true})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- n.Run(ctx) }()
				select {
				case <-n.Ready():
				case err := <-done:
					b.Fatal(err)
				}
				cpu += processCPU(b) - start
				b.StopTimer()
				heap = float64(liveHeap()-base) / 100_000
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(heap, "ready-heap-B/schedule")
		})
	}
}

// processCPU is the CPU time this process has used (user + system, all
// threads): on a shared machine other processes stretch a start's wall
// time but not its CPU time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveHeap is the bytes of live heap, after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
