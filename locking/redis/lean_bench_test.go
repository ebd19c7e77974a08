package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// The lean path's target: a try-lock + release through the
// Locker costs at most 1.1× the fenced floor in time and in client CPU, at
// 1 and 16 goroutines, and at most 25 allocations. The fenced floor is bare
// go-redis running the Locker's own scripts (acquire.lua by EVALSHA, then
// release.lua by EVALSHA on the value it stored) and nothing else: no
// token drawn, no handle, no bookkeeping, no per-operation deadline. What
// is left between the two is this package's client overhead.
//
// bsm/redislock and go-redsync are not dependencies of this module, so they
// are not measured here (the figures for them came from a scratch
// module); the floor is the yardstick.

// fencedFloor is bare go-redis running acquire.lua and release.lua.
type fencedFloor struct {
	client                 *goredis.Client
	prefix                 string
	acquireSHA, releaseSHA string
}

func newFencedFloor(b testing.TB) *fencedFloor {
	url := testenv.RedisURL(b)
	admin := adminClient(b, url)
	// The Locker's client options (context deadlines honoured, timeouts
	// capped at OpTimeout): the floor differs from the Locker only in
	// what this package does around the calls.
	c, err := newClient(url, DefaultOpTimeout)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	f := &fencedFloor{client: c.(*goredis.Client), prefix: testPrefix(b, admin)}
	if f.acquireSHA, err = f.client.ScriptLoad(context.Background(), libSrc+acquireSrc).Result(); err != nil {
		b.Fatal(err)
	}
	if f.releaseSHA, err = f.client.ScriptLoad(context.Background(), releaseSrc).Result(); err != nil {
		b.Fatal(err)
	}
	return f
}

// keys are one worker's lock keys and fence keys, laid out as the Locker's.
func (f *fencedFloor) keys(worker string) (locks, fences []string) {
	locks, fences = make([]string, benchKeys), make([]string, benchKeys)
	for i := range locks {
		locks[i] = fmt.Sprintf("%s{%s%02d}", f.prefix, worker, i)
		fences[i] = locks[i] + fenceSuffix
	}
	return locks, fences
}

const floorTTLms = int64(benchTTL / time.Millisecond)

func (f *fencedFloor) lockRelease(ctx context.Context, lockKey, fenceKey string) error {
	fence, err := f.client.EvalSha(ctx, f.acquireSHA, []string{lockKey, fenceKey}, floorValue, "", floorTTLms).Int64()
	if err != nil || fence <= 0 {
		return fmt.Errorf("acquire %s = %d, %v", lockKey, fence, err)
	}
	value := floorValue + fenceSep + strconv.FormatInt(fence, 10)
	n, err := f.client.EvalSha(ctx, f.releaseSHA, []string{lockKey}, value).Int64()
	if err != nil || n != 1 {
		return fmt.Errorf("release %s = %d, %v", lockKey, n, err)
	}
	return nil
}

// phase is what one side spent in one block of operations.
type phase struct{ ops, wallNs, cpuNs, allocs, bytes int64 }

func (p *phase) add(q phase) {
	p.ops += q.ops
	p.wallNs += q.wallNs
	p.cpuNs += q.cpuNs
	p.allocs += q.allocs
	p.bytes += q.bytes
}

// measure runs ops operations of do spread over g goroutines and returns
// the wall time, the process's CPU time (user + system: the client's, as
// Redis runs in its own process) and the allocations they took.
func measure(g, ops int, do func(worker, i int) error) (phase, error) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs, bytes := ms.Mallocs, ms.TotalAlloc
	cpu0 := cpuNow()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for w := range g {
		n := ops / g
		if w < ops%g {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := do(w, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	cpu := cpuNow() - cpu0
	runtime.ReadMemStats(&ms)
	close(errs)
	p := phase{ops: int64(ops), wallNs: int64(wall), cpuNs: int64(cpu), allocs: int64(ms.Mallocs - mallocs), bytes: int64(ms.TotalAlloc - bytes)}
	return p, <-errs
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkVsFencedFloor alternates blocks of the Locker's try-lock +
// release with blocks of the fenced floor's (which side goes first
// alternates too), at 1 and 16 goroutines, and reports each side's time,
// client CPU and allocations per operation and the Locker's ratios to the
// floor. Blocks, not single operations, so that the process CPU and the
// allocations of a block are one side's alone; alternating, so that a
// shared machine's drifting load falls on both sides alike.
//
// G1held and G16held are the contended try-lock: every key is held by
// someone else (another Locker, another value for the floor), so each op
// is one try-lock answered "held" (the Locker's nil handle, the floor's
// acquire.lua answering 0), with nothing to release.
func BenchmarkVsFencedFloor(b *testing.B) {
	for _, mode := range []struct {
		g    int
		held bool
	}{{1, false}, {16, false}, {1, true}, {16, true}} {
		g := mode.g
		name := fmt.Sprintf("G%d", g)
		if mode.held {
			name += "held"
		}
		b.Run(name, func(b *testing.B) {
			f := newFencedFloor(b)
			url := testenv.RedisURL(b)
			l, err := Open(Options{URL: url, KeyPrefix: testPrefix(b, adminClient(b, url))})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close(context.Background()) })
			ctx := context.Background()
			lkeys := make([][]string, g)
			flocks, ffences := make([][]string, g), make([][]string, g)
			for w := range g {
				lkeys[w] = make([]string, benchKeys)
				for i := range lkeys[w] {
					lkeys[w][i] = fmt.Sprintf("bench/lean/%d/%02d", w, i)
				}
				flocks[w], ffences[w] = f.keys(fmt.Sprintf("bench/lean/%d/", w))
			}
			locker := func(w, i int) error {
				h, err := l.TryLock(ctx, lkeys[w][i%benchKeys], benchTTL)
				if err != nil || h == nil {
					return fmt.Errorf("TryLock = %v, %v", h, err)
				}
				return l.Release(ctx, h)
			}
			floor := func(w, i int) error {
				return f.lockRelease(ctx, flocks[w][i%benchKeys], ffences[w][i%benchKeys])
			}
			if mode.held {
				// Another Locker holds the Locker's keys, another value
				// the floor's.
				other, err := Open(Options{URL: url, KeyPrefix: l.prefix})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = other.Close(context.Background()) })
				for w := range g {
					for i := range benchKeys {
						if h, err := other.TryLock(ctx, lkeys[w][i], benchTTL); err != nil || h == nil {
							b.Fatalf("holding %s: %v, %v", lkeys[w][i], h, err)
						}
						if fence, err := f.client.EvalSha(ctx, f.acquireSHA, []string{flocks[w][i], ffences[w][i]}, "other", "", floorTTLms).Int64(); err != nil || fence <= 0 {
							b.Fatalf("holding %s: %d, %v", flocks[w][i], fence, err)
						}
					}
				}
				locker = func(w, i int) error {
					h, err := l.TryLock(ctx, lkeys[w][i%benchKeys], benchTTL)
					if err != nil || h != nil {
						return fmt.Errorf("TryLock of a held key = %v, %v; want nil, nil", h, err)
					}
					return nil
				}
				floor = func(w, i int) error {
					fence, err := f.client.EvalSha(ctx, f.acquireSHA, []string{flocks[w][i%benchKeys], ffences[w][i%benchKeys]}, floorValue, "", floorTTLms).Int64()
					if err != nil || fence != 0 {
						return fmt.Errorf("acquire of a held key = %d, %v; want 0", fence, err)
					}
					return nil
				}
			}
			// Warm both pools up to g connections.
			for _, do := range []func(int, int) error{locker, floor} {
				if _, err := measure(g, 4*g, do); err != nil {
					b.Fatal(err)
				}
			}
			block := 128 * g
			var lp, fp phase
			b.ResetTimer()
			for round := 0; b.N-int(lp.ops) > 0; round++ {
				n := min(block, b.N-int(lp.ops))
				sides := []func(int, int) error{locker, floor}
				acc := []*phase{&lp, &fp}
				if round%2 == 1 {
					sides[0], sides[1] = sides[1], sides[0]
					acc[0], acc[1] = acc[1], acc[0]
				}
				for s := range 2 {
					p, err := measure(g, n, sides[s])
					if err != nil {
						b.Fatal(err)
					}
					acc[s].add(p)
				}
			}
			b.StopTimer()
			per := func(v, ops int64) float64 { return float64(v) / float64(ops) }
			b.ReportMetric(per(lp.wallNs, lp.ops), "locker-ns/op")
			b.ReportMetric(per(fp.wallNs, fp.ops), "floor-ns/op")
			b.ReportMetric(per(lp.cpuNs, lp.ops), "locker-cpu-ns/op")
			b.ReportMetric(per(fp.cpuNs, fp.ops), "floor-cpu-ns/op")
			b.ReportMetric(per(lp.allocs, lp.ops), "locker-allocs/op")
			b.ReportMetric(per(fp.allocs, fp.ops), "floor-allocs/op")
			b.ReportMetric(per(lp.bytes, lp.ops), "locker-B/op")
			b.ReportMetric(per(fp.bytes, fp.ops), "floor-B/op")
			b.ReportMetric(float64(lp.wallNs)/float64(fp.wallNs), "time-ratio")
			b.ReportMetric(float64(lp.cpuNs)/float64(fp.cpuNs), "cpu-ratio")
		})
	}
}
