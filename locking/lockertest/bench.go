package lockertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// benchKeys is how many keys each benchmark goroutine rotates through: a
// small set, so the backend's table stays the same size while it runs, but
// more than one, so a key is not re-taken the instant it is released.
const benchKeys = 64

// Benchmark measures the round trip the scheduler makes on every locked
// tick, TryLock then Release, against lockers from newLocker:
//
//   - TryLockRelease/Sequential: one goroutine, rotating over a small key set;
//   - TryLockRelease/Parallel: b.RunParallel, each goroutine its own keys on
//     one shared Locker (compare with -cpu 1,2 to see whether it scales).
//
// Both report allocations. Lockers are closed when the benchmark ends.
func Benchmark(b *testing.B, newLocker func(b testing.TB) locking.Locker) {
	b.Run("TryLockRelease/Sequential", func(b *testing.B) {
		l := benchLocker(b, newLocker)
		keys := benchKeySet("bench/seq/")
		ctx := b.Context()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := tryLockRelease(ctx, l, keys[i%benchKeys]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("TryLockRelease/Parallel", func(b *testing.B) {
		l := benchLocker(b, newLocker)
		ctx := b.Context()
		var worker atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			keys := benchKeySet(fmt.Sprintf("bench/par/%d/", worker.Add(1)))
			for i := 0; pb.Next(); i++ {
				if err := tryLockRelease(ctx, l, keys[i%benchKeys]); err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
			}
		})
	})
}

// benchTTL is long enough that no benchmark lock lapses while it is held.
const benchTTL = time.Minute

func tryLockRelease(ctx context.Context, l locking.Locker, key string) error {
	h, err := l.TryLock(ctx, key, benchTTL)
	if err != nil {
		return fmt.Errorf("TryLock(%q): %w", key, err)
	}
	if h == nil {
		return fmt.Errorf("TryLock(%q) = (nil, nil): contended on a key only this goroutine uses", key)
	}
	if err := l.Release(ctx, h); err != nil {
		return fmt.Errorf("Release(%v): %w", h, err)
	}
	return nil
}

func benchLocker(b *testing.B, newLocker func(b testing.TB) locking.Locker) locking.Locker {
	b.Helper()
	l := newLocker(b)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			b.Errorf("closing the benchmark's locker: %v", err)
		}
	})
	return l
}

func benchKeySet(prefix string) []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return keys
}
