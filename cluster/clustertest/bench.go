package clustertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// Benchmark measures what history costs a backend, with stores from b.New:
//
//   - RecordRuns/Batch64: one RecordRuns of 64 runs of 64 schedules (what a
//     busy node flushes after a round of ticks), each with a 1 KiB output
//     tail, histories at their keep (cluster.DefaultKeep) so every call
//     trims too;
//   - Runs/Limit100: reading a full history of 100 runs with 4 KiB output
//     tails each (`history ID -n 100`, the API's runs endpoint).
//   - RecordRuns/ProvisionalThenFinal: a run's provisional record (Result
//     running, written as it starts) then its final one, each its own
//     call, on a history at its keep: what every run costs now;
//   - RecordSkips/One: one RecordSkips of one skip (what a node records
//     as it decides a tick without a run), the schedule's skips at their
//     keep so calls trim too; ns/op is the cost of one record;
//   - RecordSkips/Batch64: one RecordSkips of 64 skips of 64 schedules.
//
// All report allocations; the batches also runs/s or skips/s.
func Benchmark(b *testing.B, be Backend) {
	b.Run("RecordRuns/Batch64", func(b *testing.B) {
		st := benchStore(b, be)
		ctx := b.Context()
		const n = 64
		batch := make([]cluster.Run, n)
		out := strings.Repeat("x", 1023) + "\n"
		for i := range batch {
			batch[i] = benchRun(fmt.Sprintf("bench/record/%02d", i), 0, out)
		}
		// Fill every history to its keep first, so the loop measures the
		// steady state: an append and a trim per schedule.
		for k := range cluster.DefaultKeep {
			for i := range batch {
				batch[i] = benchRun(batch[i].Schedule, k, out)
			}
			if err := st.RecordRuns(ctx, batch, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		k := cluster.DefaultKeep
		for b.Loop() {
			for i := range batch {
				batch[i] = benchRun(batch[i].Schedule, k, out)
			}
			k++
			if err := st.RecordRuns(ctx, batch, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "runs/s")
	})
	b.Run("RecordRuns/ProvisionalThenFinal", func(b *testing.B) {
		st := benchStore(b, be)
		ctx := b.Context()
		const schedule = "bench/provisional"
		out := strings.Repeat("x", 1023) + "\n"
		fill := make([]cluster.Run, cluster.DefaultKeep)
		for k := range fill {
			fill[k] = benchRun(schedule, k, out)
		}
		if err := st.RecordRuns(ctx, fill, cluster.DefaultKeep); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		k := cluster.DefaultKeep
		for b.Loop() {
			final := benchRun(schedule, k, out)
			running := final
			running.Attempts, running.Result, running.Duration, running.Error, running.OutputTail = 0, cluster.ResultRunning, 0, "", ""
			k++
			if err := st.RecordRuns(ctx, []cluster.Run{running}, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
			if err := st.RecordRuns(ctx, []cluster.Run{final}, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RecordSkips/One", func(b *testing.B) {
		st := benchStore(b, be)
		ctx := b.Context()
		const schedule = "bench/skip"
		fill := make([]cluster.Skip, cluster.DefaultKeep)
		for k := range fill {
			fill[k] = benchSkip(schedule, k)
		}
		if err := st.RecordSkips(ctx, fill, cluster.DefaultKeep); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		k := cluster.DefaultKeep
		for b.Loop() {
			if err := st.RecordSkips(ctx, []cluster.Skip{benchSkip(schedule, k)}, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
			k++
		}
	})
	b.Run("RecordSkips/Batch64", func(b *testing.B) {
		st := benchStore(b, be)
		ctx := b.Context()
		const n = 64
		batch := make([]cluster.Skip, n)
		for k := range cluster.DefaultKeep {
			for i := range batch {
				batch[i] = benchSkip(fmt.Sprintf("bench/skips/%02d", i), k)
			}
			if err := st.RecordSkips(ctx, batch, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		k := cluster.DefaultKeep
		for b.Loop() {
			for i := range batch {
				batch[i] = benchSkip(batch[i].Schedule, k)
			}
			k++
			if err := st.RecordSkips(ctx, batch, cluster.DefaultKeep); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "skips/s")
	})
	b.Run("Runs/Limit100", func(b *testing.B) {
		st := benchStore(b, be)
		ctx := b.Context()
		const schedule = "bench/read"
		out := strings.Repeat("y", cluster.MaxOutputTail-1) + "\n"
		batch := make([]cluster.Run, cluster.DefaultKeep)
		for k := range batch {
			batch[k] = benchRun(schedule, k, out)
		}
		if err := st.RecordRuns(ctx, batch, cluster.DefaultKeep); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			rs, err := st.Runs(ctx, schedule, 100)
			if err != nil {
				b.Fatal(err)
			}
			if len(rs) != 100 {
				b.Fatalf("Runs = %d runs, want 100", len(rs))
			}
		}
	})
}

// benchRun is the k-th run of schedule, its fields of a realistic size.
func benchRun(schedule string, k int, out string) cluster.Run {
	started := base.Add(time.Duration(k) * time.Minute)
	return cluster.Run{
		Schedule:   schedule,
		Tick:       started,
		Node:       "node-1",
		Result:     "failure",
		StartedAt:  started.Add(3 * time.Millisecond),
		Duration:   1234 * time.Millisecond,
		Fence:      started.UnixMicro(),
		Attempts:   1,
		Error:      "exit status 1: connection refused",
		RunID:      fmt.Sprintf("%032x", k),
		OutputTail: out,
	}
}

// benchSkip is the skip of schedule's k-th tick, its fields of a
// realistic size.
func benchSkip(schedule string, k int) cluster.Skip {
	tick := base.Add(time.Duration(k) * time.Minute)
	return cluster.Skip{
		Schedule: schedule,
		Tick:     tick,
		Node:     "node-1",
		Reason:   cluster.SkipPaused,
		Note:     "maintenance window, back at 06:00",
		At:       tick.Add(2 * time.Millisecond),
	}
}

func benchStore(b *testing.B, be Backend) cluster.Store {
	b.Helper()
	st := be.New(b)
	if st == nil {
		b.Fatal("Backend.New returned a nil Store")
	}
	if c, ok := st.(closer); ok {
		b.Cleanup(func() {
			ctx, cancel := contextWithTimeout()
			defer cancel()
			if err := c.Close(ctx); err != nil {
				b.Errorf("closing the benchmark's store: %v", err)
			}
		})
	}
	return st
}
