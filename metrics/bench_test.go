package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// BenchmarkTryLockRelease measures what instrumenting costs one lock
// cycle, against the bare memory backend (the cheapest backend, so the
// overhead shows at its largest).
func BenchmarkTryLockRelease(b *testing.B) {
	for _, bc := range []struct {
		name string
		wrap bool
	}{{"memory", false}, {"instrumented", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var l locking.Locker = memory.New()
			if bc.wrap {
				l = InstrumentLocker(l, "memory", New(prometheus.NewRegistry(), build))
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				h, err := l.TryLock(ctx, "bench", time.Minute)
				if err != nil || h == nil {
					b.Fatalf("TryLock = %v, %v", h, err)
				}
				if err := l.Release(ctx, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkObserverTick is the metrics work of one tick that runs.
func BenchmarkObserverTick(b *testing.B) {
	m := New(prometheus.NewRegistry(), build)
	tick := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		m.TickFired("nightly", tick, 3*time.Millisecond)
		m.RunFinished("nightly", tick, scheduler.ResultSuccess, 2*time.Second, false)
		m.NextTick("nightly", tick.Add(24*time.Hour))
	}
}

// BenchmarkWriteText is one scrape's per-schedule series at 100,000
// schedules, histograms per node (what a node that big runs by default).
func BenchmarkWriteText(b *testing.B) {
	m := New(prometheus.NewRegistry(), build, WithPerScheduleHistograms(false))
	next := time.Unix(1_800_000_000, 0)
	for i := range 100_000 {
		id := fmt.Sprintf("s%06d", i)
		m.AddSchedule(id)
		m.NextTick(id, next)
	}
	var n int64
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		if err := m.sched.writeText(func(p []byte) error { n += int64(len(p)); return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "bytes/scrape")
}
