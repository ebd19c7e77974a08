package redis

import (
	"context"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Two nodes of one cluster (one key prefix) and one of another on one real
// Redis: a watch hears the marks its own cluster raises (granted, paused,
// missed), with the key and T to the microsecond, and nothing of a done or
// contended answer, nor of the other cluster.
func TestWatchTicksHearsRaisedMarksOfItsCluster(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	a := openLocker(t, Options{URL: url, KeyPrefix: prefix})
	b := openLocker(t, Options{URL: url, KeyPrefix: prefix})
	other := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin) + "other:"})

	heard := make(chan locking.TickMark, 16)
	listening := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- b.WatchTicks(ctx, locking.TickWatch{
			Mark: func(m locking.TickMark) { heard <- m },
			Listening: func() {
				select {
				case listening <- struct{}{}:
				default:
				}
			},
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchTicks: %v", err)
		}
	}()
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("never listening")
	}

	now := time.Now().Truncate(time.Second).Add(123456 * time.Microsecond)
	expect := func(key string, tick time.Time) {
		t.Helper()
		select {
		case m := <-heard:
			if m.Key != key || !m.Tick.Equal(tick) {
				t.Fatalf("heard %q at %v, want %q at %v", m.Key, m.Tick, key, tick)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("never heard %q at %v", key, tick)
		}
	}
	// Granted: heard. The same tick again (done) and the next while the
	// lock is held (contended): not heard.
	mustTick(t, other, tickReq("sched one", now), locking.TickGranted)
	ans := mustTick(t, a, tickReq("sched one", now), locking.TickGranted)
	expect("sched one", now)
	mustTick(t, a, tickReq("sched one", now), locking.TickDone)
	mustTick(t, a, tickReq("sched one", now.Add(time.Millisecond)), locking.TickContended)
	if err := a.Release(context.Background(), ans.Handle); err != nil {
		t.Fatal(err)
	}
	// Paused: heard.
	if err := a.SetPause(context.Background(), "paused", locking.Pause{Paused: true}); err != nil {
		t.Fatal(err)
	}
	mustTick(t, a, tickReq("paused", now), locking.TickPaused)
	expect("paused", now)
	// Missed: heard.
	late := tickReq("late", now.Add(-time.Minute))
	mustTick(t, a, locking.TickRequest{Key: "late", Tick: now.Add(-testSkew / 2), TTL: testTTL, MaxSkew: testSkew},
		locking.TickGranted)
	expect("late", now.Add(-testSkew/2))
	late.Tick = now.Add(-testSkew/2 + testSkew/4)
	late.MaxSkew = time.Millisecond
	mustTick(t, a, late, locking.TickMissed)
	expect("late", late.Tick)
	// A batch (ticks.lua, the scheduler's burst path): each raised mark
	// heard, in order.
	answers, errs := a.TryLockTicks(context.Background(), []locking.TickRequest{
		tickReq("batch one", now), tickReq("batch two", now)})
	for i, want := range []string{"batch one", "batch two"} {
		if errs[i] != nil || answers[i].Verdict != locking.TickGranted {
			t.Fatalf("batch request %d: %v, %v; want granted", i, answers[i].Verdict, errs[i])
		}
		expect(want, now)
	}
	select {
	case m := <-heard:
		t.Fatalf("heard %q at %v: nothing else was raised", m.Key, m.Tick)
	default:
	}
}
