package agent_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type noRunner struct{}

func (noRunner) RunManual(scheduler.Manual) error { return errors.New("benchmark: no manual runs") }

// BenchmarkTickHistory measures a locked tick's path with the run history
// recorded (the agent's observer, which queues the record; the agent
// batches it to the backend every 250ms, competing for the same backend)
// against without (metrics only), interleaved tick by tick in one process
// on one backend so drift of the machine's load hits both alike. A tick is
// what the scheduler does for it from step 4 on: try-lock-tick, a no-op
// job, release, and the observers (fired, finished, recorded). Reported:
// the median ns/tick of each and the overhead in percent (target:
// within 10%).
func BenchmarkTickHistory(b *testing.B) {
	for _, be := range opstest.Shared() {
		b.Run(be.Name, func(b *testing.B) {
			_, st := be.New(b)
			tl := st.(locking.TickLocker)
			rel := st.(interface {
				Release(context.Context, *locking.Handle) error
			})
			ab, err := agent.For(st)
			if err != nil {
				b.Fatal(err)
			}
			m := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{Version: "bench"})
			ag := agent.New(ab, noRunner{}, agent.Options{NodeID: "bench"})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); ag.Run(ctx, nil) }()
			defer func() { cancel(); <-done }()
			observers := map[bool]scheduler.Observer{false: m, true: scheduler.Observers(m, ag.Observer())}
			keys := map[bool]string{false: "off", true: "on"}
			if err := tl.InitMarks(ctx, []string{"off", "on"}); err != nil {
				b.Fatal(err)
			}
			// Ticks one millisecond apart from now, allowed an hour ahead
			// of the backend's clock: as many ticks as the benchmark wants,
			// each a fresh one, without waiting for real time.
			base := time.Now().Add(time.Second).Truncate(time.Millisecond)
			var spent [2][]time.Duration
			tick := func(i int, on bool) {
				t := base.Add(time.Duration(i) * time.Millisecond)
				start := time.Now()
				ans, err := tl.TryLockTick(ctx, locking.TickRequest{Key: keys[on], Tick: t, TTL: 10 * time.Second,
					MaxSkew: time.Hour, Window: time.Hour})
				if err != nil || ans.Verdict != locking.TickGranted {
					b.Fatalf("tick %d (%s): %v %v", i, keys[on], ans.Verdict, err)
				}
				obs := observers[on]
				obs.TickFired(keys[on], t, 0)
				if err := rel.Release(ctx, ans.Handle); err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				obs.RunFinished(keys[on], t, scheduler.ResultSuccess, d, false)
				if ro, ok := obs.(scheduler.RunObserver); ok {
					ro.RunRecorded(scheduler.RunRecord{Schedule: keys[on], Tick: t, Node: "bench", Result: scheduler.ResultSuccess,
						Start: start, Duration: d, Fence: ans.Handle.Fence(), Attempts: 1, RunID: fmt.Sprintf("%s-%d", keys[on], i),
						Output: "some output of the job\n"})
				}
				idx := 0
				if on {
					idx = 1
				}
				spent[idx] = append(spent[idx], time.Since(start))
			}
			b.ResetTimer()
			for i := range b.N {
				tick(i, i%2 == 1)
			}
			b.StopTimer()
			if b.N < 2 {
				return
			}
			// Medians: on a shared machine a few stalled ticks would
			// otherwise decide the mean.
			off, on := float64(median(spent[0])), float64(median(spent[1]))
			b.ReportMetric(off, "ns/tick-off")
			b.ReportMetric(on, "ns/tick-on")
			b.ReportMetric(100*(on-off)/off, "%overhead")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkHistoryMemoryPG measures what full histories cost Postgres:
// 1,000 schedules with cluster.DefaultKeep runs each, every run with a full
// 4 KiB output tail of random printable bytes (what compresses worst), in
// a namespace of its own; reported as the growth of
// pg_total_relation_size('bext_runs') (table, TOAST and indexes; other
// tests writing to the shared server meanwhile would add to it), then
// again after twice and three times as many runs (the trim keeps it
// bounded: the contract lets a history reach 2×keep before it is cut, and
// VACUUM makes the space of trimmed rows reusable without shrinking the
// files). Run with
// -benchtime=1x: the metrics, not ns/op, are the result.
// locking/redis's BenchmarkHistoryMemory is Redis's counterpart.
func BenchmarkHistoryMemoryPG(b *testing.B) {
	const schedules, batch = 1000, 250
	url := testenv.PGURL(b)
	ns := testenv.UniqueName(b)
	ctx := context.Background()
	l, err := pg.Open(ctx, pg.Options{URL: url, Namespace: ns, Holder: "bench", OpTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = conn.Exec(ctx, `DELETE FROM bext_runs WHERE namespace = $1`, ns)
		_, _ = conn.Exec(ctx, `DELETE FROM bext_run_counts WHERE namespace = $1`, ns)
		_ = conn.Close(ctx)
		_ = l.Close(ctx)
	}()
	size := func() int64 {
		var n int64
		if _, err := conn.Exec(ctx, `VACUUM bext_runs`); err != nil {
			b.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('bext_runs')`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tail := func() string {
		var sb strings.Builder
		for range cluster.MaxOutputTail {
			sb.WriteByte(byte(' ' + rng.IntN(95)))
		}
		return sb.String()
	}
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	record := func(from, rounds int) {
		runs := make([]cluster.Run, 0, batch)
		for k := from; k < from+rounds; k++ {
			for s := range schedules {
				at := base.Add(time.Duration(k) * time.Minute)
				runs = append(runs, cluster.Run{Schedule: fmt.Sprintf("schedule-%04d", s), Tick: at, Node: "node-a",
					Result: "success", StartedAt: at, Duration: time.Second, Fence: int64(k), Attempts: 1,
					RunID: fmt.Sprintf("%d-%d", s, k), OutputTail: tail()})
				if len(runs) == batch {
					if err := l.RecordRuns(ctx, runs, cluster.DefaultKeep); err != nil {
						b.Fatal(err)
					}
					runs = runs[:0]
				}
			}
		}
		if len(runs) > 0 {
			if err := l.RecordRuns(ctx, runs, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
		}
	}
	for range b.N {
		before := size()
		record(0, cluster.DefaultKeep)
		full := size() - before
		record(cluster.DefaultKeep, cluster.DefaultKeep)
		again := size() - before
		record(2*cluster.DefaultKeep, cluster.DefaultKeep)
		third := size() - before
		var kept int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM bext_runs WHERE namespace = $1`, ns).Scan(&kept); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(full)/(1<<20), "MiB-full")
		b.ReportMetric(float64(again)/(1<<20), "MiB-after-2x-runs")
		b.ReportMetric(float64(third)/(1<<20), "MiB-after-3x-runs")
		b.ReportMetric(float64(kept)/schedules, "runs-kept/schedule")
		b.ReportMetric(float64(full)/schedules, "B/schedule")
	}
}
