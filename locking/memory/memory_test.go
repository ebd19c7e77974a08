package memory_test

import (
	"sync"
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

func TestConformance(t *testing.T) {
	c := &cluster{clock: newFakeClock(), roots: map[testing.TB]*memory.Locker{}}
	lockertest.Run(t, lockertest.Backend{
		New:       c.New,
		Expire:    func(testing.TB, string) { c.clock.Advance(expireAll) },
		TTLExpiry: true,
		Advance:   c.clock.Advance,
	})
}

// The suite once more on the real clock, so the time.Now path (monotonic
// readings) is exercised too; the cases about time then wait for real.
func TestConformanceRealClock(t *testing.T) {
	var mu sync.Mutex
	roots := map[testing.TB]*memory.Locker{}
	var offset time.Duration // Expire moves only this test's view of time
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(offset)
	}
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
		Expire: func(testing.TB, string) {
			mu.Lock()
			defer mu.Unlock()
			offset += expireAll
		},
		TTLExpiry: true,
	})
}

func BenchmarkLocker(b *testing.B) {
	lockertest.Benchmark(b, func(testing.TB) locking.Locker { return memory.New() })
}
