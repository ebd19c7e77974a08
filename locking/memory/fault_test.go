package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// The fault injections lose what they say, and only that: a tick whose
// mark was forgotten or set back is granted again, under a higher fence
// even after the fence counters were lost; dropped locks are lost to
// their holders.
func TestFaultInjection(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	l := memory.New(memory.WithClock(clock.Now))
	t.Cleanup(func() { _ = l.Close(ctx) })
	tick := clock.Now()
	req := locking.TickRequest{Key: "s", Tick: tick, TTL: time.Minute, MaxSkew: time.Minute}
	grant := func(what string) *locking.Handle {
		t.Helper()
		ans, err := l.TryLockTick(ctx, req)
		if err != nil || ans.Verdict != locking.TickGranted {
			t.Fatalf("%s: got %v, %v; want granted", what, ans.Verdict, err)
		}
		if err := l.Release(ctx, ans.Handle); err != nil {
			t.Fatalf("%s: release: %v", what, err)
		}
		return ans.Handle
	}
	done := func(what string) {
		t.Helper()
		if ans, err := l.TryLockTick(ctx, req); err != nil || ans.Verdict != locking.TickDone {
			t.Fatalf("%s: got %v, %v; want done", what, ans.Verdict, err)
		}
	}
	first := grant("first")
	done("after the grant")

	l.ForgetMarks("other") // another key's: s keeps its mark
	done("after another key's mark was forgotten")
	clock.Advance(time.Millisecond)
	l.ForgetMarks("s")
	second := grant("after its mark was forgotten")
	done("after the second grant")

	clock.Advance(time.Millisecond)
	l.RewindMarks(time.Second)
	l.ForgetFences()
	third := grant("after the marks were set back")
	if !(first.Fence() < second.Fence() && second.Fence() < third.Fence()) {
		t.Errorf("fences %d, %d, %d across lost marks and counters; want strictly increasing", first.Fence(), second.Fence(), third.Fence())
	}

	held, err := l.TryLock(ctx, "k", time.Minute)
	if err != nil || held == nil {
		t.Fatalf("TryLock: %v, %v", held, err)
	}
	l.DropLocks()
	if err := l.Renew(ctx, held); !errors.Is(err, locking.ErrLockLost) {
		t.Errorf("Renew of a dropped lock: %v; want ErrLockLost", err)
	}
	if again, err := l.TryLock(ctx, "k", time.Minute); err != nil || again == nil {
		t.Errorf("TryLock after the locks were dropped: %v, %v; want the lock", again, err)
	}
}
