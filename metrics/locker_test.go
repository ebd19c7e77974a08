package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// faulty wraps a real memory Locker and fails its next N calls the way a
// broken network backend does. It also counts pings.
type faulty struct {
	*memory.Locker

	mu       sync.Mutex
	failNext int
	pings    int
}

// errDown is what a driver says when the backend is down; its text has a
// URL with a password that must never reach /readyz.
var errDown = fmt.Errorf("dial redis://:hunter2@db:6379: connection refused: %w", locking.ErrUnavailable)

func (f *faulty) fail(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = n
}

func (f *faulty) fault() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNext > 0 {
		f.failNext--
		return errDown
	}
	return nil
}

func (f *faulty) pinged() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pings
}

func (f *faulty) TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Locker.TryLock(ctx, key, ttl)
}

func (f *faulty) Renew(ctx context.Context, h *locking.Handle) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Locker.Renew(ctx, h)
}

func (f *faulty) Release(ctx context.Context, h *locking.Handle) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Locker.Release(ctx, h)
}

func (f *faulty) Ping(ctx context.Context) error {
	f.mu.Lock()
	f.pings++
	f.mu.Unlock()
	if err := f.fault(); err != nil {
		return err
	}
	return f.Locker.Ping(ctx)
}

// bare hides every optional interface of the Locker it holds.
type bare struct{ locking.Locker }

func ops(m *Metrics, op, result string) float64 {
	return testutil.ToFloat64(m.lockOps.WithLabelValues("memory", op, result))
}

func held(m *Metrics) float64 { return testutil.ToFloat64(m.heldLocks.WithLabelValues("memory")) }

func TestInstrumentLockerCounts(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	m := New(reg, build)
	mem := memory.New(memory.WithClock(clock.Now))
	f := &faulty{Locker: mem}
	l := InstrumentLocker(f, "memory", m)

	// Acquired, contended (another holder of the same table), error.
	h1, err := l.TryLock(ctx, "k1", time.Minute)
	if err != nil || h1 == nil {
		t.Fatalf("TryLock k1 = %v, %v", h1, err)
	}
	peer := mem.Peer("other")
	ph, err := peer.TryLock(ctx, "k2", time.Minute)
	if err != nil || ph == nil {
		t.Fatalf("peer TryLock = %v, %v", ph, err)
	}
	if h, err := l.TryLock(ctx, "k2", time.Minute); h != nil || err != nil {
		t.Fatalf("TryLock of a held key = %v, %v, want contention", h, err)
	}
	f.fail(1)
	if _, err := l.TryLock(ctx, "k3", time.Minute); !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("TryLock with a fault = %v", err)
	}
	if _, err := l.TryLock(ctx, "", time.Minute); !errors.Is(err, locking.ErrInvalid) {
		t.Fatalf("TryLock of an empty key = %v", err)
	}
	for result, want := range map[string]float64{resultAcquired: 1, resultContended: 1, resultError: 2} {
		if got := ops(m, opTryLock, result); got != want {
			t.Errorf("try_lock %s = %v, want %v", result, got, want)
		}
	}
	if got := held(m); got != 1 {
		t.Errorf("held locks = %v, want 1", got)
	}

	// Renew ok, renew error (the lock is still counted), renew lost.
	if err := l.Renew(ctx, h1); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	f.fail(1)
	if err := l.Renew(ctx, h1); !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Renew with a fault = %v", err)
	}
	if got := held(m); got != 1 {
		t.Errorf("held locks after a renew error = %v, want 1", got)
	}
	clock.Advance(2 * time.Minute) // h1 expires
	if err := l.Renew(ctx, h1); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Renew of an expired lock = %v, want ErrLockLost", err)
	}
	for result, want := range map[string]float64{resultOK: 1, resultLost: 1, resultError: 1} {
		if got := ops(m, opRenew, result); got != want {
			t.Errorf("renew %s = %v, want %v", result, got, want)
		}
	}
	if got := held(m); got != 0 {
		t.Errorf("held locks after renew lost = %v, want 0", got)
	}
	// Releasing the lost handle counts as lost but must not count it again.
	if err := l.Release(ctx, h1); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Release of a lost lock = %v, want ErrLockLost", err)
	}
	if got := held(m); got != 0 {
		t.Errorf("held locks after releasing a lost lock = %v, want 0", got)
	}

	// Release ok, and a release the backend failed to answer: both let go.
	h2, _ := l.TryLock(ctx, "k4", time.Minute)
	h3, _ := l.TryLock(ctx, "k5", time.Minute)
	if h2 == nil || h3 == nil {
		t.Fatal("could not take k4 and k5")
	}
	if err := l.Release(ctx, h2); err != nil {
		t.Fatalf("Release: %v", err)
	}
	f.fail(1)
	if err := l.Release(ctx, h3); !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Release with a fault = %v", err)
	}
	for result, want := range map[string]float64{resultOK: 1, resultLost: 1, resultError: 1} {
		if got := ops(m, opRelease, result); got != want {
			t.Errorf("release %s = %v, want %v", result, got, want)
		}
	}
	if got := held(m); got != 0 {
		t.Errorf("held locks after releases = %v, want 0", got)
	}

	// Close drops whatever is still held.
	if h, _ := l.TryLock(ctx, "k6", time.Minute); h == nil {
		t.Fatal("could not take k6")
	}
	if got := held(m); got != 1 {
		t.Errorf("held locks = %v, want 1", got)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := held(m); got != 0 {
		t.Errorf("held locks after Close = %v, want 0", got)
	}

	// Every operation was timed: 7 try-locks, 3 renews, 3 releases.
	for op, want := range map[string]uint64{opTryLock: 7, opRenew: 3, opRelease: 3} {
		n, _ := histogram(t, reg, "bext_locking_operation_duration_seconds", map[string]string{"backend": "memory", "op": op})
		if n != want {
			t.Errorf("%s durations observed %d times, want %d", op, n, want)
		}
	}
}

func TestInstrumentLockerForwardsOptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	m := New(prometheus.NewRegistry(), build)
	mem := memory.New(memory.WithHolder("node-a"))
	l := InstrumentLocker(mem, "memory", m)

	if _, ok := l.(locking.Pinger); !ok {
		t.Fatal("the instrumented Locker hides Ping")
	}
	ls, ok := l.(lister)
	if !ok {
		t.Fatal("the instrumented Locker hides List")
	}
	if h, err := l.TryLock(ctx, "k", time.Minute); h == nil || err != nil {
		t.Fatalf("TryLock = %v, %v", h, err)
	}
	infos, err := ls.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].Key != "k" || infos[0].Holder != "node-a" {
		t.Errorf("List = %+v, %v; want the one lock k held by node-a", infos, err)
	}
	if u, ok := l.(interface{ Unwrap() locking.Locker }); !ok || u.Unwrap() != mem {
		t.Error("Unwrap does not return the wrapped Locker")
	}
	// A closed memory Locker's Ping fails: proof the call is forwarded.
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.(locking.Pinger).Ping(ctx); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("Ping after Close = %v, want the backend's ErrClosed", err)
	}

	// A backend with neither: Ping is nil, List says it cannot list.
	b := InstrumentLocker(bare{memory.New()}, "memory", New(prometheus.NewRegistry(), build))
	if err := b.(locking.Pinger).Ping(ctx); err != nil {
		t.Errorf("Ping of a backend that cannot ping = %v, want nil", err)
	}
	_, err = b.(lister).List(ctx)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "cannot list") {
		t.Errorf("List of a backend that cannot list = %v, want ErrUnsupported", err)
	}
}
