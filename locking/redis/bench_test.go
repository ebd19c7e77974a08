package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/lockertest"
)

// The target: a try-lock + release through this package within 1.2× of
// the floor, the same two round trips made with bare go-redis calls (SET
// NX PX, then the release script by EVALSHA) and nothing else: no token,
// no fence, no handle, no per-operation timeout. Compare
// BenchmarkLocker/TryLockRelease/* with BenchmarkFloor/* of the same shape.

const (
	benchKeys = 64 // keys each goroutine rotates over, as lockertest does
	benchTTL  = time.Minute
	// benchParallelism × GOMAXPROCS goroutines: 16 on the 2-core CI machine.
	benchParallelism = 8
)

func benchLocker(b testing.TB) locking.Locker {
	url := testenv.RedisURL(b)
	l, err := Open(Options{URL: url, KeyPrefix: testPrefix(b, adminClient(b, url))})
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	return l
}

// BenchmarkLocker runs the shared backend benchmark: TryLockRelease,
// Sequential and Parallel (GOMAXPROCS goroutines).
func BenchmarkLocker(b *testing.B) {
	lockertest.Benchmark(b, benchLocker)
}

// BenchmarkLockerParallel16 is lockertest's Parallel case with 16
// goroutines, the concurrency the issue sets the target at.
func BenchmarkLockerParallel16(b *testing.B) {
	l := benchLocker(b)
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx := b.Context()
	var worker atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := worker.Add(1)
		keys := make([]string, benchKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("bench/par/%d/%02d", id, i)
		}
		for i := 0; pb.Next(); i++ {
			h, err := l.TryLock(ctx, keys[i%benchKeys], benchTTL)
			if err != nil || h == nil {
				b.Errorf("TryLock = %v, %v", h, err)
				return
			}
			if err := l.Release(ctx, h); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkFloor is the same work with bare go-redis: SET NX PX, then
// the release script by EVALSHA.
func BenchmarkFloor(b *testing.B) {
	b.Run("Sequential", func(b *testing.B) {
		f := newFloor(b)
		keys := f.keys("bench/seq/")
		ctx := b.Context()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := f.lockRelease(ctx, keys[i%benchKeys]); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, par := range []struct {
		name        string
		parallelism int
	}{{"Parallel", 1}, {"Parallel16", benchParallelism}} {
		b.Run(par.name, func(b *testing.B) {
			f := newFloor(b)
			ctx := b.Context()
			var worker atomic.Int64
			b.SetParallelism(par.parallelism)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				keys := f.keys(fmt.Sprintf("bench/par/%d/", worker.Add(1)))
				for i := 0; pb.Next(); i++ {
					if err := f.lockRelease(ctx, keys[i%benchKeys]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

type floor struct {
	client     *goredis.Client
	prefix     string
	releaseSHA string
}

func newFloor(b *testing.B) *floor {
	url := testenv.RedisURL(b)
	admin := adminClient(b, url)
	f := &floor{client: adminClient(b, url), prefix: testPrefix(b, admin)}
	sha, err := f.client.ScriptLoad(b.Context(), releaseSrc).Result()
	if err != nil {
		b.Fatal(err)
	}
	f.releaseSHA = sha
	return f
}

// keys are the lock keys one goroutine uses, laid out as the Locker's.
func (f *floor) keys(prefix string) []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s{%s%02d}", f.prefix, prefix, i)
	}
	return keys
}

const floorValue = "0123456789abcdef0123456789abcdef" // a token's length

func (f *floor) lockRelease(ctx context.Context, key string) error {
	ok, err := f.client.SetNX(ctx, key, floorValue, benchTTL).Result()
	if err != nil || !ok {
		return fmt.Errorf("SET NX %s = %v, %v", key, ok, err)
	}
	n, err := f.client.EvalSha(ctx, f.releaseSHA, []string{key}, floorValue).Int64()
	if err != nil || n != 1 {
		return fmt.Errorf("release %s = %d, %v", key, n, err)
	}
	return nil
}

// BenchmarkVsFloor alternates the Locker's try-lock+release with the
// floor's, op by op in the same goroutines (which one goes first alternates
// too), and reports each one's mean time and their ratio. On a shared
// machine whose load drifts between separate benchmark runs, this paired
// measurement is the fair comparison; ns/op is the pair's total.
func BenchmarkVsFloor(b *testing.B) {
	for _, par := range []struct {
		name        string
		parallelism int // 0: sequential
	}{{"Sequential", 0}, {"Parallel16", benchParallelism}} {
		b.Run(par.name, func(b *testing.B) {
			f := newFloor(b)
			l := benchLocker(b)
			b.Cleanup(func() { _ = l.Close(context.Background()) })
			ctx := b.Context()
			var lockerNs, floorNs, worker atomic.Int64
			loop := func(next func() bool) error {
				id := worker.Add(1)
				fkeys := f.keys(fmt.Sprintf("bench/vs/%d/", id))
				keys := make([]string, benchKeys)
				for i := range keys {
					keys[i] = fmt.Sprintf("bench/vs/%d/%02d", id, i)
				}
				for i := 0; next(); i++ {
					key := keys[i%benchKeys]
					for j := range 2 {
						start := time.Now()
						if (i+j)%2 == 0 {
							h, err := l.TryLock(ctx, key, benchTTL)
							if err != nil || h == nil {
								return fmt.Errorf("TryLock = %v, %v", h, err)
							}
							if err := l.Release(ctx, h); err != nil {
								return err
							}
							lockerNs.Add(int64(time.Since(start)))
						} else {
							if err := f.lockRelease(ctx, fkeys[i%benchKeys]); err != nil {
								return err
							}
							floorNs.Add(int64(time.Since(start)))
						}
					}
				}
				return nil
			}
			b.ReportAllocs()
			if par.parallelism == 0 {
				if err := loop(b.Loop); err != nil {
					b.Fatal(err)
				}
			} else {
				b.SetParallelism(par.parallelism)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					if err := loop(pb.Next); err != nil {
						b.Error(err)
					}
				})
			}
			n := float64(b.N)
			b.ReportMetric(float64(lockerNs.Load())/n, "locker-ns/op")
			b.ReportMetric(float64(floorNs.Load())/n, "floor-ns/op")
			b.ReportMetric(float64(lockerNs.Load())/float64(floorNs.Load()), "locker/floor")
		})
	}
}

// BenchmarkTryLockTick alternates try-lock-tick+release (the scheduler's
// locked tick) with try-lock+release on other keys, op by op, and reports
// each one's mean time: the tick script's extra work (mark, pause flag,
// clock) against the plain acquire, in the same round trips.
func BenchmarkTryLockTick(b *testing.B) {
	l := benchLocker(b)
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	tl := l.(*Locker)
	ctx := b.Context()
	keys, tkeys := make([]string, benchKeys), make([]string, benchKeys)
	last := make([]time.Time, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/lock/%02d", i)
		tkeys[i] = fmt.Sprintf("bench/tick/%02d", i)
	}
	var tickNs, lockNs int64
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i % benchKeys
		start := time.Now()
		// Each key's next tick: now, or just after its last one.
		tick := start.Truncate(time.Microsecond)
		if !tick.After(last[k]) {
			tick = last[k].Add(time.Microsecond)
		}
		last[k] = tick
		a, err := tl.TryLockTick(ctx, locking.TickRequest{Key: tkeys[k], Tick: tick, TTL: benchTTL, MaxSkew: 5 * time.Second})
		if err != nil || a.Verdict != locking.TickGranted {
			b.Fatalf("TryLockTick = %v, %v", a.Verdict, err)
		}
		if err := l.Release(ctx, a.Handle); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		tickNs += int64(mid.Sub(start))
		h, err := l.TryLock(ctx, keys[k], benchTTL)
		if err != nil || h == nil {
			b.Fatalf("TryLock = %v, %v", h, err)
		}
		if err := l.Release(ctx, h); err != nil {
			b.Fatal(err)
		}
		lockNs += int64(time.Since(mid))
	}
	n := float64(b.N)
	b.ReportMetric(float64(tickNs)/n, "tick-ns/op")
	b.ReportMetric(float64(lockNs)/n, "lock-ns/op")
}
