package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// BenchmarkHistoryMemory measures what full histories cost Redis: 1,000
// schedules, each with cluster.DefaultKeep runs carrying a full 4 KiB
// output tail (random printable bytes: what compresses worst), on a
// private server so used_memory counts nothing else. It then records as
// many runs again and reports the memory after that too: trimming keeps
// it flat. Run with -benchtime=1x; the metrics, not ns/op, are the result.
func BenchmarkHistoryMemory(b *testing.B) {
	const schedules, batch = 1000, 250
	keep := cluster.DefaultKeep
	srv := testenv.StartRedis(b)
	l := openLocker(b, Options{URL: srv.URL(), OpTimeout: time.Minute})
	admin := adminClient(b, srv.URL())
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	tail := func() string {
		buf := make([]byte, cluster.MaxOutputTail)
		for i := range buf {
			buf[i] = byte(' ' + rng.IntN(95))
		}
		return string(buf)
	}
	usedMemory := func() int64 {
		info, err := admin.Info(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}
		}
		b.Fatal("INFO memory has no used_memory")
		return 0
	}
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	record := func(rounds, from int) {
		runs := make([]cluster.Run, 0, batch)
		for k := from; k < from+rounds; k++ {
			for s := range schedules {
				started := base.Add(time.Duration(k) * time.Minute)
				runs = append(runs, cluster.Run{
					Schedule: fmt.Sprintf("schedule-%04d", s), Tick: started, Node: "node-1",
					Result: "failure", StartedAt: started.Add(3 * time.Millisecond),
					Duration: 1234 * time.Millisecond, Fence: started.UnixMicro(), Attempts: 1,
					Error: "exit status 1: connection refused", RunID: fmt.Sprintf("%032x", k*schedules+s),
					OutputTail: tail(),
				})
				if len(runs) == batch {
					if err := l.RecordRuns(ctx, runs, keep); err != nil {
						b.Fatal(err)
					}
					runs = runs[:0]
				}
			}
		}
	}
	for b.Loop() {
		if err := admin.FlushAll(ctx).Err(); err != nil { // the private server only
			b.Fatal(err)
		}
		before := usedMemory()
		record(keep, 0)
		full := usedMemory()
		record(keep, keep) // as many again: each history trimmed back to keep
		again := usedMemory()
		if n := admin.ZCard(ctx, l.lockKey("schedule-0000")+runsSuffix).Val(); n != int64(keep) {
			b.Fatalf("a history holds %d runs, want %d", n, keep)
		}
		b.ReportMetric(float64(before)/(1<<20), "MiB-before")
		b.ReportMetric(float64(full)/(1<<20), "MiB-full")
		b.ReportMetric(float64(again)/(1<<20), "MiB-after-2x")
		b.ReportMetric(float64(full-before)/float64(schedules*keep), "B/run")
	}
}

// BenchmarkRunsVsFloor alternates Runs(100) over a full history (4 KiB
// tails) with the bare ZREVRANGE of the same key by go-redis (no decoding),
// op by op: on a loaded machine this paired figure tells what decoding
// costs better than two separate runs.
func BenchmarkRunsVsFloor(b *testing.B) {
	url := testenv.RedisURL(b)
	admin := adminClient(b, url)
	l := openLocker(b, Options{URL: url, KeyPrefix: testPrefix(b, admin)})
	ctx := b.Context()
	out := strings.Repeat("y", cluster.MaxOutputTail-1) + "\n"
	runs := make([]cluster.Run, cluster.DefaultKeep)
	for k := range runs {
		runs[k] = testRun("bench/read", fmt.Sprintf("%032x", k), t0.Add(time.Duration(k)*time.Minute))
		runs[k].OutputTail = out
	}
	if err := l.RecordRuns(ctx, runs, cluster.DefaultKeep); err != nil {
		b.Fatal(err)
	}
	key := l.lockKey("bench/read") + runsSuffix
	var runsNs, floorNs int64
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range 2 {
			start := time.Now()
			if (i+j)%2 == 0 {
				rs, err := l.Runs(ctx, "bench/read", 100)
				if err != nil || len(rs) != 100 {
					b.Fatalf("Runs = %d runs, %v", len(rs), err)
				}
				runsNs += int64(time.Since(start))
			} else {
				vs, err := admin.ZRevRange(ctx, key, 0, 99).Result()
				if err != nil || len(vs) != 100 {
					b.Fatalf("ZREVRANGE = %d, %v", len(vs), err)
				}
				floorNs += int64(time.Since(start))
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(runsNs)/n, "runs-ns/op")
	b.ReportMetric(float64(floorNs)/n, "floor-ns/op")
}
