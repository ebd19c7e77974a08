package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// TryLockTick is counted as try_lock under the verdict's result, a granted
// tick's handle is held until released, and the pause and mark calls are
// forwarded to the backend.
func TestInstrumentLockerCountsTicks(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	m := New(reg, build, WithClock(clock.Now))
	mem := memory.New(memory.WithClock(clock.Now))
	f := &faulty{Locker: mem} // counts pings
	l := InstrumentLocker(f, "memory", m)
	t.Cleanup(func() { _ = l.Close(ctx) })
	tl, ok := l.(locking.TickLocker)
	if !ok {
		t.Fatal("the instrumented memory Locker is not a TickLocker")
	}
	p, ok := l.(locking.Pauser)
	if !ok {
		t.Fatal("the instrumented memory Locker is not a Pauser")
	}
	now := clock.Now()
	req := func(key string, tick time.Time) locking.TickRequest {
		return locking.TickRequest{Key: key, Tick: tick, TTL: time.Minute, MaxSkew: 5 * time.Second, Window: time.Minute}
	}
	want := func(r locking.TickRequest, v locking.TickVerdict) locking.TickAnswer {
		t.Helper()
		ans, err := tl.TryLockTick(ctx, r)
		if err != nil || ans.Verdict != v {
			t.Fatalf("TryLockTick(%s, %v) = %v, %v; want %v", r.Key, r.Tick, ans.Verdict, err, v)
		}
		return ans
	}

	granted := want(req("k", now), locking.TickGranted)
	if got := held(m); got != 1 {
		t.Errorf("held locks after a granted tick = %v, want 1", got)
	}
	want(req("k", now), locking.TickDone)
	want(req("k", now.Add(time.Second)), locking.TickContended)
	// Missed: an old mark first (a wide MaxSkew lets a tick 50s back be
	// granted), then a tick beyond the window.
	wide := req("late", now.Add(-50*time.Second))
	wide.MaxSkew = 2 * time.Minute
	h := want(wide, locking.TickGranted).Handle
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	late := req("late", now.Add(-30*time.Second))
	late.Window = 10 * time.Second
	want(late, locking.TickMissed)
	// Paused, through the wrapper, which the backend then reads.
	if err := p.SetPause(ctx, "paused", locking.Pause{Paused: true, Note: "test"}); err != nil {
		t.Fatal(err)
	}
	if got, err := mem.GetPause(ctx, "paused"); err != nil || !got.Paused || got.Note != "test" {
		t.Fatalf("backend's GetPause after SetPause through the wrapper = %+v, %v", got, err)
	}
	if got, err := p.GetPause(ctx, "paused"); err != nil || !got.Paused {
		t.Fatalf("GetPause through the wrapper = %+v, %v", got, err)
	}
	want(req("paused", now), locking.TickPaused)
	// InitMarks reaches the backend: a tick before it is then done.
	if err := tl.InitMarks(ctx, []string{"init"}); err != nil {
		t.Fatal(err)
	}
	want(req("init", now.Add(-time.Second)), locking.TickDone)
	// Errors: a tick an hour ahead (the backend answered: readiness keeps
	// its last success), and a bad request.
	if _, err := tl.TryLockTick(ctx, req("k2", now.Add(time.Hour))); !errors.Is(err, locking.ErrTickAhead) {
		t.Fatalf("TryLockTick an hour ahead = %v, want ErrTickAhead", err)
	}
	if err := m.Ready(ctx); err != nil || f.pinged() != 0 {
		t.Errorf("Ready after a refused future tick = %v after %d pings, want nil without a ping: the backend answered", err, f.pinged())
	}
	if _, err := tl.TryLockTick(ctx, req("", now)); !errors.Is(err, locking.ErrInvalid) {
		t.Fatalf("TryLockTick with an empty key = %v, want ErrInvalid", err)
	}

	for result, n := range map[string]float64{
		resultAcquired: 2, resultContended: 1, resultDone: 2, resultPaused: 1, resultMissed: 1, resultError: 2,
	} {
		if got := ops(m, opTryLock, result); got != n {
			t.Errorf("try_lock %s = %v, want %v", result, got, n)
		}
	}
	if n, _ := histogram(t, reg, "bext_locking_operation_duration_seconds", map[string]string{"backend": "memory", "op": opTryLock}); n != 9 {
		t.Errorf("try_lock durations observed %d times, want 9 (every TryLockTick)", n)
	}
	if got := held(m); got != 1 {
		t.Errorf("held locks = %v, want 1 (the first granted tick)", got)
	}
	if err := l.Release(ctx, granted.Handle); err != nil {
		t.Fatal(err)
	}
	if got := held(m); got != 0 {
		t.Errorf("held locks after releasing the granted tick = %v, want 0", got)
	}
}

// The tick results exist at zero from the start for a backend with
// try-lock-tick, and not at all for one without.
func TestInstrumentLockerTickSeriesOnlyForTickLockers(t *testing.T) {
	has := func(l locking.Locker) bool {
		reg := prometheus.NewRegistry()
		InstrumentLocker(l, "memory", New(reg, build))
		n, err := testutil.GatherAndCount(reg, "bext_locking_operations_total")
		if err != nil {
			t.Fatal(err)
		}
		return n == 3+3+7
	}
	if !has(memory.New()) {
		t.Error("memory's try_lock done/paused/missed/expired series are missing")
	}
	if has(bare{memory.New()}) {
		t.Error("a backend without try-lock-tick has try_lock done/paused/missed/expired series")
	}
}

// leaseOnly is a Locker that is a LeaseBounder and nothing else optional.
type leaseOnly struct{ locking.Locker }

func (leaseOnly) MaxLease() time.Duration { return 7 * time.Second }

// pgLike has the optional LeaseBounder, as Postgres does.
type pgLike struct{ *memory.Locker }

func (*pgLike) MaxLease() time.Duration { return 9 * time.Second }

// tickOnly is a TickLocker without a Pauser.
type tickOnly struct {
	locking.Locker
	tl locking.TickLocker
}

func (t tickOnly) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	return t.tl.TryLockTick(ctx, r)
}

func (t tickOnly) InitMarks(ctx context.Context, keys []string) error {
	return t.tl.InitMarks(ctx, keys)
}

// The wrapper is a LeaseBounder exactly when its backend is, always
// forwards try-lock-tick and pause flags, and answers ErrUnsupported for
// them when its backend lacks them.
func TestInstrumentLockerOptionalInterfacesMatchBackend(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close(ctx) })
	for _, c := range []struct {
		name        string
		backend     locking.Locker
		lease, tick bool
	}{
		{"bare", bare{mem.Peer("")}, false, false},
		{"lease bounder", leaseOnly{mem.Peer("")}, true, false},
		{"memory", mem.Peer(""), false, true},
		{"tick locker without pauser", tickOnly{mem.Peer(""), mem.Peer("")}, false, true},
		{"postgres-like", &pgLike{mem.Peer("pg")}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := InstrumentLocker(c.backend, "memory", New(prometheus.NewRegistry(), build))
			if got := is[locking.LeaseBounder](l); got != c.lease {
				t.Errorf("wrapper is a locking.LeaseBounder: %v; the backend: %v", got, c.lease)
			}
			if _, ok := l.(locking.Pinger); !ok {
				t.Error("the wrapper hides Ping")
			}
			if u, ok := l.(interface{ Unwrap() locking.Locker }); !ok || u.Unwrap() != c.backend {
				t.Error("Unwrap does not return the backend")
			}
			if lb, ok := l.(locking.LeaseBounder); ok {
				if got, want := lb.MaxLease(), c.backend.(locking.LeaseBounder).MaxLease(); got != want {
					t.Errorf("MaxLease = %v, want the backend's %v", got, want)
				}
			}
			err := l.InitMarks(ctx, []string{"k-" + c.name})
			if c.tick && err != nil {
				t.Errorf("InitMarks = %v, want forwarded", err)
			}
			if !c.tick && !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("InitMarks on a backend without marks = %v, want ErrUnsupported", err)
			}
		})
	}
}
