package memory

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Many holders that died without releasing neither wedge their keys nor
// leave the table growing: expired entries are swept by later TryLocks.
func TestExpiredEntriesAreSwept(t *testing.T) {
	ctx := context.Background()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := New(WithClock(clock.Now))
	t.Cleanup(func() { _ = l.Close(ctx) })

	const dead = 20000
	for i := range dead {
		if h, err := l.TryLock(ctx, fmt.Sprintf("dead/%d", i), time.Second); h == nil || err != nil {
			t.Fatalf("TryLock(dead/%d) = %v, %v, want a handle", i, h, err)
		}
	}
	if n := l.tab.len(); n != dead {
		t.Fatalf("table holds %d entries, want %d live locks", n, dead)
	}
	clock.Advance(2 * time.Second) // every holder is now dead

	// A dead holder's key is free at once, without any sweep.
	h, err := l.TryLock(ctx, "dead/7", time.Minute)
	if h == nil || err != nil {
		t.Fatalf("TryLock(dead/7) after its holder's TTL = %v, %v, want a handle", h, err)
	}

	// Fresh work on other keys sweeps the dead entries as it goes: the table
	// ends up near the live count, not the live count plus every dead one.
	const live = 100
	for i := range live {
		if h, err := l.TryLock(ctx, fmt.Sprintf("live/%d", i), time.Minute); h == nil || err != nil {
			t.Fatalf("TryLock(live/%d) = %v, %v, want a handle", i, h, err)
		}
	}
	for range 10 * numShards * minSweepLen {
		h, err := l.TryLock(ctx, "churn", time.Minute)
		if h == nil || err != nil {
			t.Fatalf("TryLock(churn) = %v, %v, want a handle", h, err)
		}
		if err := l.Release(ctx, h); err != nil {
			t.Fatalf("Release(churn): %v", err)
		}
		clock.Advance(time.Millisecond)
	}
	// Each shard sweeps when it doubles, and the churn key lives in only
	// one shard, so sweep the rest through short-lived keys spread over all.
	for i := range 4 * numShards * minSweepLen {
		if _, err := l.TryLock(ctx, fmt.Sprintf("short/%d", i), time.Millisecond); err != nil {
			t.Fatalf("TryLock(short/%d): %v", i, err)
		}
		clock.Advance(time.Millisecond)
	}
	n := l.tab.len()
	if limit := 2*(live+1) + numShards*minSweepLen; n > limit {
		t.Fatalf("table holds %d entries after the dead ones expired, want at most %d (2 x live + per-shard slack)", n, limit)
	}
	t.Logf("table: %d entries after %d dead holders expired and %d live locks were taken", n, dead, live)
}

// List sweeps too, and reports only live locks with their holder and time left.
func TestListSweepsAndReportsHolder(t *testing.T) {
	ctx := context.Background()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := New(WithClock(clock.Now), WithHolder("node-a"))
	b := a.Peer("node-b")
	t.Cleanup(func() { _ = a.Close(ctx); _ = b.Close(ctx) })

	for i := range 50 {
		if _, err := a.TryLock(ctx, fmt.Sprintf("short/%d", i), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	ha, _ := a.TryLock(ctx, "a", time.Minute)
	hb, _ := b.TryLock(ctx, "b", 2*time.Minute)
	if ha == nil || hb == nil {
		t.Fatal("TryLock of free keys a and b did not return handles")
	}
	clock.Advance(10 * time.Second)

	got, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key, holder string
		fence       int64
		left        time.Duration
	}{
		{"a", "node-a", ha.Fence(), 50 * time.Second},
		{"b", "node-b", hb.Fence(), 110 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %+v, want only the two live locks", got)
	}
	for i, w := range want {
		g := got[i]
		if g.Key != w.key || g.Holder != w.holder || g.Fence != w.fence || g.TTLLeft != w.left {
			t.Errorf("List[%d] = %+v, want key %q holder %q fence %d TTLLeft %v", i, g, w.key, w.holder, w.fence, w.left)
		}
	}
	if n := a.tab.len(); n != 2 {
		t.Errorf("table holds %d entries after List, want 2: List sweeps what it meets", n)
	}
}

// Fencing tokens are per shard but strictly increasing per key, whatever
// other keys do in between.
func TestFenceIncreasesPerKeyAmongOtherKeys(t *testing.T) {
	ctx := context.Background()
	l := New()
	t.Cleanup(func() { _ = l.Close(ctx) })
	last := map[string]int64{}
	for i := range 5000 {
		k := fmt.Sprintf("k%d", i%37)
		h, err := l.TryLock(ctx, k, time.Minute)
		if h == nil || err != nil {
			t.Fatalf("TryLock(%s) = %v, %v", k, h, err)
		}
		if h.Fence() <= last[k] {
			t.Fatalf("fence of %s = %d after %d", k, h.Fence(), last[k])
		}
		last[k] = h.Fence()
		if err := l.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
}

// A restarted process (a new table, later on the clock) issues larger
// fencing tokens than the old one, so resources that remember the last
// token they accepted keep accepting the new holder's writes.
func TestFenceIncreasesAcrossRestart(t *testing.T) {
	ctx := context.Background()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	before := New(WithClock(clock.Now))
	var last int64
	for range 1000 {
		h, err := before.TryLock(ctx, "k", time.Minute)
		if h == nil || err != nil {
			t.Fatalf("TryLock(k) = %v, %v", h, err)
		}
		last = h.Fence()
		if err := before.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	_ = before.Close(ctx)
	clock.Advance(time.Second) // the restart takes a moment
	after := New(WithClock(clock.Now))
	t.Cleanup(func() { _ = after.Close(ctx) })
	h, err := after.TryLock(ctx, "k", time.Minute)
	if h == nil || err != nil {
		t.Fatalf("TryLock(k) after restart = %v, %v", h, err)
	}
	if h.Fence() <= last {
		t.Fatalf("fence after restart = %d, want > %d (the last one before)", h.Fence(), last)
	}
}
