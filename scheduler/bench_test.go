package scheduler_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

var nopJob = scheduler.JobFunc(func(context.Context, scheduler.Tick) error { return nil })

// running starts s and returns a function that stops it and waits.
func running(tb testing.TB, s *scheduler.Scheduler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	}
}

func waitIdle(tb testing.TB, s *scheduler.Scheduler) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkMemoryPerSchedule: live heap per schedule with 100,000 cron
// schedules built and started (the one shared job excluded).
func BenchmarkMemoryPerSchedule(b *testing.B) {
	const n = 100_000
	var perSchedule float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		scheds := make([]scheduler.Schedule, n)
		for i := range scheds {
			scheds[i] = scheduler.Schedule{
				ID: "schedule-" + strconv.Itoa(i), CronExpr: fmt.Sprintf("%d %d * * *", i%60, (i/60)%24),
				Hint: hints.NodeLocal, Job: nopJob,
			}
		}
		s, err := scheduler.New(scheduler.Options{NodeID: "bench", Clock: fakeclock.New(t0)}, scheds)
		if err != nil {
			b.Fatal(err)
		}
		scheds = nil
		stop := running(b, s)
		waitIdle(b, s)
		runtime.GC()
		runtime.ReadMemStats(&after)
		perSchedule = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		stop()
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perSchedule, "B/schedule")
}

// stepSpec fires at offset + k*period (k an integer), so n schedules with
// period n ms and offsets 0..n-1 ms fire one per millisecond.
type stepSpec struct{ period, offset int64 }

func (s stepSpec) Next(t time.Time) time.Time {
	n := t.UnixNano() - s.offset
	k := n / s.period
	if n < 0 && n%s.period != 0 {
		k--
	}
	return time.Unix(0, (k+1)*s.period+s.offset).UTC()
}

// BenchmarkFire: the cost of one fire (pop, next tick, re-file, start the
// tick's goroutine, run a no-op node-local job), with n schedules in the
// heap. Flat in n is the point: the loop never scans all schedules.
func BenchmarkFire(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("schedules=%d", n), func(b *testing.B) {
			clock := fakeclock.New(t0)
			scheds := make([]scheduler.Schedule, n)
			for i := range scheds {
				scheds[i] = scheduler.Schedule{
					ID: "s" + strconv.Itoa(i), Spec: stepSpec{int64(n) * int64(time.Millisecond), int64(i) * int64(time.Millisecond)},
					Hint: hints.NodeLocal, Job: nopJob,
				}
			}
			s, err := scheduler.New(scheduler.Options{NodeID: "bench", Clock: clock}, scheds)
			if err != nil {
				b.Fatal(err)
			}
			stop := running(b, s)
			defer stop()
			waitIdle(b, s)
			b.ResetTimer()
			for left := b.N; left > 0; {
				k := min(left, 100)
				clock.Advance(time.Duration(k) * time.Millisecond)
				waitIdle(b, s)
				left -= k
			}
			b.StopTimer()
		})
	}
}

// onceSpec fires once, at at.
type onceSpec struct{ at time.Time }

func (o onceSpec) Next(t time.Time) time.Time {
	if t.Before(o.at) {
		return o.at
	}
	return time.Time{}
}

// BenchmarkSameSecond10k: 10,000 require_global schedules due at the same
// instant, on the real clock and the memory backend. Reports how late the
// jobs started after their tick (target: all within 50 ms).
func BenchmarkSameSecond10k(b *testing.B) {
	const n = 10_000
	var p50, p99, worst time.Duration
	var skipped, workers int
	var cpu, wall, startCPU time.Duration
	for range b.N {
		at := time.Now().Truncate(time.Second).Add(2 * time.Second)
		late := make([]time.Duration, n)
		var next atomic.Int64
		var cpu0 atomic.Int64 // set at the tick, read by the jobs
		var cpuP99 time.Duration
		job := scheduler.JobFunc(func(_ context.Context, t scheduler.Tick) error {
			k := next.Add(1)
			late[k-1] = time.Since(t.Time)
			if k == n*99/100 {
				cpuP99 = processCPU() - time.Duration(cpu0.Load())
			}
			return nil
		})
		scheds := make([]scheduler.Schedule, n)
		for i := range scheds {
			scheds[i] = scheduler.Schedule{ID: "s" + strconv.Itoa(i), Spec: onceSpec{at},
				Hint: hints.RequireGlobal, ExpectedRuntime: time.Second, Job: job}
		}
		// A tick whose lock came later than MaxClockSkew is skipped, not
		// run: count it (it would be a failed target) instead of waiting.
		out := &outcomes{}
		out.all.Add(n)
		s, err := scheduler.New(scheduler.Options{NodeID: "bench", Locker: memory.New(), Backend: hints.Local,
			Observer: out}, scheds)
		if err != nil {
			b.Fatal(err)
		}
		stop := running(b, s)
		<-time.NewTimer(time.Until(at)).C // the window starts at the tick
		cpu0.Store(int64(processCPU()))
		wall0 := time.Now()
		out.all.Wait()
		cpu, wall = processCPU()-time.Duration(cpu0.Load()), time.Since(wall0)
		startCPU = cpuP99
		workers = s.WorkersStarted()
		stop()
		late = late[:next.Load()]
		skipped = n - len(late)
		slices.Sort(late)
		if len(late) > 0 {
			p50, p99, worst = late[len(late)/2], late[len(late)*99/100], late[len(late)-1]
		}
	}
	b.ReportMetric(float64(skipped), "skipped")
	// Goroutines started to carry the 10,000 ticks (internal/workpool): far fewer
	// than one each when the ticks do not block.
	b.ReportMetric(float64(workers), "workers")
	// From the tick until every tick's outcome was reported: the CPU it
	// took (both cores), and the wall time it took.
	b.ReportMetric(float64(cpu)/1e6, "window-cpu-ms")
	b.ReportMetric(float64(wall)/1e6, "window-wall-ms")
	// From the tick until the 99th percentile's job started: the CPU that
	// its lateness is made of (on two cores, about twice it), steadier on
	// a shared machine than the lateness itself.
	b.ReportMetric(float64(startCPU)/1e6, "p99-start-cpu-ms")
	b.ReportMetric(float64(p50)/1e6, "p50-late-ms")
	b.ReportMetric(float64(p99)/1e6, "p99-late-ms")
	b.ReportMetric(float64(worst)/1e6, "max-late-ms")
}

// outcomes counts down one per tick that ran or was skipped.
type outcomes struct {
	scheduler.NopObserver
	all sync.WaitGroup
}

func (o *outcomes) TickSkipped(string, time.Time, scheduler.SkipReason) { o.all.Done() }
func (o *outcomes) RunFinished(string, time.Time, scheduler.RunResult, time.Duration, bool) {
	o.all.Done()
}

// BenchmarkLockedBurst: the cost of a burst of 1,000 require_global ticks
// due at once on the memory backend, on a fake clock, so the figures
// (ns/op, allocs/op: per burst) are the scheduler's and the backend's
// work alone, without the real clock's wait: steadier than the window
// of BenchmarkSameSecond10k on a busy machine.
func BenchmarkLockedBurst(b *testing.B) { lockedBurst(b, nil) }

// lockedBurst is BenchmarkLockedBurst with tr as the scheduler's tracer.
func lockedBurst(b *testing.B, tr scheduler.RunTracer) {
	const n = 1_000
	clock := fakeclock.New(t0)
	scheds := make([]scheduler.Schedule, n)
	for i := range scheds {
		scheds[i] = scheduler.Schedule{ID: "s" + strconv.Itoa(i), Spec: stepSpec{int64(time.Second), 0},
			Hint: hints.RequireGlobal, ExpectedRuntime: time.Second, Job: nopJob}
	}
	s, err := scheduler.New(scheduler.Options{NodeID: "bench", Clock: clock,
		Locker: memory.New(memory.WithClock(clock.Now)), Backend: hints.Local, Tracer: tr}, scheds)
	if err != nil {
		b.Fatal(err)
	}
	stop := running(b, s)
	defer stop()
	waitIdle(b, s)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		clock.Advance(time.Second)
		waitIdle(b, s)
	}
	b.StopTimer()
}
