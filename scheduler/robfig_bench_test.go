package scheduler_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/robfig/cron/v3"
)

// The engine against robfig/cron v3, in one process, through each one's
// public API, on the real clock. A shared machine makes absolute figures
// noisy; the ratios of figures measured side by side are the signal. CPU
// is the process's (getrusage: user + system), so each figure is taken
// while only the system it is charged to has work due.

const vsN = 100_000

// idleSpecs are n cron expressions that are not due for hours: one a
// minute, all in the hour twelve hours from now.
func idleSpecs(n int) []string {
	h := (time.Now().Hour() + 12) % 24
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%d %d * * *", i%60, h)
	}
	return out
}

func bextOf(b *testing.B, specs []string, extra ...scheduler.Schedule) *scheduler.Scheduler {
	scheds := make([]scheduler.Schedule, 0, len(specs)+len(extra))
	for i, sp := range specs {
		scheds = append(scheds, scheduler.Schedule{ID: "s" + strconv.Itoa(i), CronExpr: sp,
			Hint: hints.NodeLocal, Job: nopJob})
	}
	scheds = append(scheds, extra...)
	s, err := scheduler.New(scheduler.Options{NodeID: "bench"}, scheds)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func robfigOf(b *testing.B, specs []string) *cron.Cron {
	c := cron.New(cron.WithLocation(time.UTC))
	for _, sp := range specs {
		if _, err := c.AddFunc(sp, func() {}); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func heapNow() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkVsRobfigMemory: live heap per idle schedule, 100,000 cron
// schedules started in each. Target: bext at most 400 B.
func BenchmarkVsRobfigMemory(b *testing.B) {
	var bextB, robB float64
	for i := range b.N {
		specs := idleSpecs(vsN)
		measure := func(name string) {
			before := heapNow()
			switch name {
			case "bext":
				s := bextOf(b, specs)
				stop := running(b, s)
				waitIdle(b, s)
				bextB = float64(heapNow()-before) / vsN
				stop()
			case "robfig":
				c := robfigOf(b, specs)
				c.Start()
				robB = float64(heapNow()-before) / vsN
				<-c.Stop().Done()
			}
		}
		order := []string{"bext", "robfig"}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			measure(name)
		}
	}
	b.ReportMetric(bextB, "bext-B/schedule")
	b.ReportMetric(robB, "robfig-B/schedule")
}

// BenchmarkVsRobfigWake: the CPU of one wake that starts 70 jobs (no-op
// jobs that report they ran), with 100,000 cron schedules in each system,
// against the floor: a bare timer that starts 70 goroutines. The 70 are
// cron specs with seconds, so the three take turns every three seconds
// (bext at 0 mod 3, the floor at 1, robfig at 2), and each wake is charged
// the CPU of a window from 20 ms before it to 280 ms after it (or until
// its 70th job ran, if later): what a system does after starting the jobs
// (robfig sorts every entry) counts too. Target: bext within 2x the floor.
func BenchmarkVsRobfigWake(b *testing.B) {
	const fires, wakes = 70, 3
	var bextCPU, robCPU, floorCPU time.Duration
	withSeconds := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	for range b.N {
		bextRan, robRan, floorRan := make(chan struct{}, fires*wakes), make(chan struct{}, fires*wakes), make(chan struct{}, fires*wakes)
		specs := idleSpecs(vsN - fires)
		var extra []scheduler.Schedule
		for i := range fires {
			extra = append(extra, scheduler.Schedule{ID: "wake" + strconv.Itoa(i), CronExpr: "0/3 * * * * *",
				Hint: hints.NodeLocal, Job: scheduler.JobFunc(func(context.Context, scheduler.Tick) error {
					bextRan <- struct{}{}
					return nil
				})})
		}
		s := bextOf(b, specs, extra...)
		c := robfigOf(b, specs)
		for range fires {
			sp, err := withSeconds.Parse("2/3 * * * * *")
			if err != nil {
				b.Fatal(err)
			}
			c.Schedule(sp, cron.FuncJob(func() { robRan <- struct{}{} }))
		}
		stop := running(b, s)
		waitIdle(b, s)
		c.Start()
		c.Entries() // answered once its loop has computed every entry's next time
		stopFloor := make(chan struct{})
		floorDone := make(chan struct{})
		go func() { // the floor: one timer, a goroutine per job
			defer close(floorDone)
			for {
				now := time.Now()
				at := now.Truncate(3 * time.Second).Add(time.Second)
				if !at.After(now) {
					at = at.Add(3 * time.Second)
				}
				t := time.NewTimer(time.Until(at))
				select {
				case <-t.C:
				case <-stopFloor:
					t.Stop()
					return
				}
				for range fires {
					go func() { floorRan <- struct{}{} }()
				}
			}
		}()
		debug.FreeOSMemory() // the setup's garbage, not collected in a window
		// The first turn of each settles (workers started, stacks grown).
		round := time.Now().Truncate(3 * time.Second).Add(6 * time.Second)
		window := func(offset time.Duration, ran chan struct{}) time.Duration {
			at := round.Add(offset)
			time.Sleep(time.Until(at.Add(-20 * time.Millisecond)))
			for len(ran) > 0 { // from a turn before
				<-ran
			}
			cpu0 := processCPU()
			for range fires {
				<-ran
			}
			time.Sleep(time.Until(at.Add(280 * time.Millisecond)))
			return processCPU() - cpu0
		}
		var bc, rc, fc time.Duration
		for range wakes {
			bc += window(0, bextRan)
			fc += window(time.Second, floorRan)
			rc += window(2*time.Second, robRan)
			round = round.Add(3 * time.Second)
		}
		bextCPU, robCPU, floorCPU = bc/wakes, rc/wakes, fc/wakes
		close(stopFloor)
		<-floorDone
		<-c.Stop().Done()
		stop()
	}
	b.ReportMetric(float64(bextCPU)/1e6, "bext-cpu-ms/wake")
	b.ReportMetric(float64(robCPU)/1e6, "robfig-cpu-ms/wake")
	b.ReportMetric(float64(floorCPU)/1e6, "floor-cpu-ms/wake")
	b.ReportMetric(float64(bextCPU)/float64(floorCPU), "bext/floor")
	b.ReportMetric(float64(robCPU)/float64(floorCPU), "robfig/floor")
}

// BenchmarkVsRobfigSameSecond10k: 10,000 ticks due at the same instant,
// bext's require_global on the memory backend, robfig's without any lock,
// taking turns in one process. Reports each one's p99 lateness (from the
// tick to the job's start). Target: bext at or below robfig, and under
// 50 ms. Also reported, bext-local: the same 10,000 as node_local
// schedules, no lock asked for, like robfig's: the engine's own share.
func BenchmarkVsRobfigSameSecond10k(b *testing.B) {
	const n = 10_000
	var bextP99, robP99, localP99, bextMax, robMax, localMax time.Duration
	var skipped int
	for i := range b.N {
		run := func(name string) (p99, worst time.Duration) {
			at := time.Now().Truncate(time.Second).Add(2 * time.Second)
			late := make([]time.Duration, n)
			var next atomic.Int64
			done := make(chan struct{})
			record := func() {
				k := next.Add(1)
				late[k-1] = time.Since(at)
				if k == n {
					close(done)
				}
			}
			switch name {
			case "bext", "bext-local":
				job := scheduler.JobFunc(func(context.Context, scheduler.Tick) error { record(); return nil })
				hint := hints.RequireGlobal
				if name == "bext-local" {
					hint = hints.NodeLocal
				}
				scheds := make([]scheduler.Schedule, n)
				for i := range scheds {
					scheds[i] = scheduler.Schedule{ID: "s" + strconv.Itoa(i), Spec: onceSpec{at},
						Hint: hint, ExpectedRuntime: time.Second, Job: job}
				}
				out := &outcomes{}
				out.all.Add(n)
				s, err := scheduler.New(scheduler.Options{NodeID: "bench", Locker: memory.New(), Backend: hints.Local,
					Observer: out}, scheds)
				if err != nil {
					b.Fatal(err)
				}
				stop := running(b, s)
				out.all.Wait()
				stop()
			case "robfig":
				c := cron.New()
				for range n {
					c.Schedule(onceSpec{at}, cron.FuncJob(record))
				}
				c.Start()
				<-done
				<-c.Stop().Done()
			}
			late = late[:next.Load()]
			if name != "robfig" {
				skipped += n - len(late)
			}
			slices.Sort(late)
			if len(late) == 0 {
				return 0, 0
			}
			return late[len(late)*99/100], late[len(late)-1]
		}
		// Each takes each place in turn.
		for k := range 3 {
			switch (i + k) % 3 {
			case 0:
				bextP99, bextMax = run("bext")
			case 1:
				robP99, robMax = run("robfig")
			case 2:
				localP99, localMax = run("bext-local")
			}
		}
	}
	b.ReportMetric(float64(bextP99)/1e6, "bext-p99-late-ms")
	b.ReportMetric(float64(robP99)/1e6, "robfig-p99-late-ms")
	b.ReportMetric(float64(localP99)/1e6, "bext-local-p99-late-ms")
	b.ReportMetric(float64(bextMax)/1e6, "bext-max-late-ms")
	b.ReportMetric(float64(localMax)/1e6, "bext-local-max-late-ms")
	b.ReportMetric(float64(robMax)/1e6, "robfig-max-late-ms")
	b.ReportMetric(float64(skipped)/float64(b.N), "bext-skipped")
}
