package memory_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/lockertest"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is the injected clock: tests move it instead of sleeping.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// expireAll is longer than any TTL the conformance suite uses, so advancing
// by it lapses every lock of the test (the suite allows that).
const expireAll = 24 * time.Hour

// cluster hands out, per test, lockers that share one table: the memory
// equivalent of several nodes of one cluster.
type cluster struct {
	clock *fakeClock
	mu    sync.Mutex
	roots map[testing.TB]*memory.Locker
}

func (c *cluster) New(t testing.TB) locking.Locker {
	c.mu.Lock()
	defer c.mu.Unlock()
	root, ok := c.roots[t]
	if !ok {
		root = memory.New(memory.WithClock(c.clock.Now), memory.WithHolder("node-0"))
		c.roots[t] = root
		t.Cleanup(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			delete(c.roots, t)
		})
		return root
	}
	return root.Peer("node-n")
}

// ForgetMark deletes key's mark from the table of t's lockers.
func (c *cluster) ForgetMark(t testing.TB, key string) {
	c.mu.Lock()
	root, ok := c.roots[t]
	c.mu.Unlock()
	if !ok {
		t.Fatalf("ForgetMark(%q): this test made no locker", key)
	}
	root.ForgetMark(key)
}

// EndLease makes r's lock in the table of t's lockers end d from now.
func (c *cluster) EndLease(t testing.TB, r locking.TickRequest, d time.Duration) {
	c.mu.Lock()
	root, ok := c.roots[t]
	c.mu.Unlock()
	if !ok {
		t.Fatalf("EndLease(%q): this test made no locker", r.Key)
	}
	root.EndLease(tickLockKey(r), d)
}

// tickLockKey is the key of r's lock in a memory table.
func tickLockKey(r locking.TickRequest) string {
	if r.PerTick {
		return locking.TickLockKey(r.Key, r.Tick)
	}
	return r.Key
}

func TestConformance(t *testing.T) {
	c := &cluster{clock: newFakeClock(), roots: map[testing.TB]*memory.Locker{}}
	lockertest.Run(t, lockertest.Backend{
		New:        c.New,
		Expire:     func(testing.TB, string) { c.clock.Advance(expireAll) },
		TTLExpiry:  true,
		Advance:    c.clock.Advance,
		Now:        c.clock.Now,
		ForgetMark: c.ForgetMark,
		EndLease:   c.EndLease,
	})
}

// The suite once more on the real clock, so the time.Now path (monotonic
// readings) is exercised too; the cases about time then wait for real.
func TestConformanceRealClock(t *testing.T) {
	var mu sync.Mutex
	roots := map[testing.TB]*memory.Locker{}
	var offset atomic.Int64 // Expire moves only this test's view of time
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	lockertest.Run(t, lockertest.Backend{
		New: func(t testing.TB) locking.Locker {
			mu.Lock()
			defer mu.Unlock()
			if root, ok := roots[t]; ok {
				return root.Peer("")
			}
			root := memory.New(memory.WithClock(clock))
			roots[t] = root
			return root
		},
		Expire:    func(testing.TB, string) { offset.Add(int64(expireAll)) },
		TTLExpiry: true,
		Now:       clock,
		ForgetMark: func(t testing.TB, key string) {
			mu.Lock()
			root, ok := roots[t]
			mu.Unlock()
			if !ok {
				t.Fatalf("ForgetMark(%q): this test made no locker", key)
			}
			root.ForgetMark(key)
		},
		EndLease: func(t testing.TB, r locking.TickRequest, d time.Duration) {
			mu.Lock()
			root, ok := roots[t]
			mu.Unlock()
			if !ok {
				t.Fatalf("EndLease(%q): this test made no locker", r.Key)
			}
			root.EndLease(tickLockKey(r), d)
		},
	})
}

func BenchmarkLocker(b *testing.B) {
	lockertest.Benchmark(b, func(testing.TB) locking.Locker { return memory.New() })
}

// Without WithClock the Locker runs on the real monotonic clock; this is the
// one test that waits, because time passing is the behaviour under test.
func TestDefaultClockExpires(t *testing.T) {
	ctx := context.Background()
	a := memory.New()
	b := a.Peer("")
	t.Cleanup(func() { _ = a.Close(ctx); _ = b.Close(ctx) })
	const ttl = 300 * time.Millisecond
	h, err := a.TryLock(ctx, "k", ttl)
	if h == nil || err != nil {
		t.Fatalf("TryLock(k) = %v, %v, want a handle", h, err)
	}
	if h2, err := b.TryLock(ctx, "k", ttl); h2 != nil || err != nil {
		t.Fatalf("peer TryLock(k) right away = %v, %v, want (nil, nil)", h2, err)
	}
	time.Sleep(ttl + 100*time.Millisecond)
	h2, err := b.TryLock(ctx, "k", time.Minute)
	if h2 == nil || err != nil {
		t.Fatalf("peer TryLock(k) after the TTL = %v, %v, want a handle", h2, err)
	}
	if err := a.Renew(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Renew of the lapsed handle = %v, want ErrLockLost", err)
	}
	if h2.Fence() <= h.Fence() {
		t.Fatalf("fence after expiry = %d, want > %d", h2.Fence(), h.Fence())
	}
}

// A huge TTL means "held until released", not an overflow into the past.
func TestHugeTTL(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	a := memory.New(memory.WithClock(clock.Now))
	t.Cleanup(func() { _ = a.Close(ctx) })
	h, err := a.TryLock(ctx, "k", time.Duration(1<<63-1))
	if h == nil || err != nil {
		t.Fatalf("TryLock(k, max duration) = %v, %v, want a handle", h, err)
	}
	clock.Advance(100 * 365 * 24 * time.Hour)
	if h2, err := a.Peer("").TryLock(ctx, "k", time.Second); h2 != nil || err != nil {
		t.Fatalf("peer TryLock(k) a century later = %v, %v, want (nil, nil)", h2, err)
	}
	if err := a.Renew(ctx, h); err != nil {
		t.Fatalf("Renew = %v", err)
	}
}
