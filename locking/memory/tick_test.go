package memory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// Nodes racing over consecutive per-tick locks of several schedules: every
// tick is granted exactly once, and taking the mark's and the lock's shard
// mutexes (in a fixed order) never deadlocks.
func TestTickPerTickRaceEachTickOnce(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	root := memory.New(memory.WithClock(clock.Now))
	t.Cleanup(func() { _ = root.Close(ctx) })
	const (
		nodes = 8
		keys  = 6
		ticks = 200
	)
	now := clock.Now()
	var (
		mu      sync.Mutex
		granted = map[string]int{}
		wg      sync.WaitGroup
	)
	for n := range nodes {
		l := root.Peer(fmt.Sprintf("node-%d", n))
		wg.Go(func() {
			for i := range ticks {
				for k := range keys {
					// Ticks 1ms apart behind the clock: all on time
					// (within MaxSkew), each a different per-tick key.
					r := locking.TickRequest{
						Key: fmt.Sprintf("sched-%d", k), Tick: now.Add(time.Duration(i-ticks) * time.Millisecond),
						TTL: time.Minute, PerTick: true, MaxSkew: time.Minute,
					}
					ans, err := l.TryLockTick(ctx, r)
					if err != nil {
						t.Errorf("TryLockTick: %v", err)
						return
					}
					if ans.Verdict == locking.TickGranted {
						mu.Lock()
						granted[locking.TickLockKey(r.Key, r.Tick)]++
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	for k, n := range granted {
		if n != 1 {
			t.Errorf("tick %s granted %d times", k, n)
		}
	}
	// Every schedule's first tick was granted; later ones only when a node
	// asked before a later tick raised the mark, so at least one each.
	if len(granted) < keys {
		t.Errorf("%d ticks granted in all, want at least one per schedule (%d)", len(granted), keys)
	}
}

// A per-tick lock is listed under its tick's key, and Close releases tick
// locks like any other.
func TestTickLocksListedAndClosed(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	a := memory.New(memory.WithClock(clock.Now), memory.WithHolder("node-a"))
	b := a.Peer("node-b")
	t.Cleanup(func() { _ = a.Close(ctx); _ = b.Close(ctx) })
	tick := clock.Now()
	r := locking.TickRequest{Key: "s", Tick: tick, TTL: time.Minute, PerTick: true, MaxSkew: time.Second}
	ans, err := a.TryLockTick(ctx, r)
	if err != nil || ans.Verdict != locking.TickGranted {
		t.Fatalf("TryLockTick = %v, %v", ans.Verdict, err)
	}
	infos, err := b.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].Key != locking.TickLockKey("s", tick) || infos[0].Holder != "node-a" || infos[0].Fence != ans.Handle.Fence() {
		t.Fatalf("List = %+v, %v; want the one per-tick lock %q held by node-a", infos, err, locking.TickLockKey("s", tick))
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if infos, err := b.List(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("List after the holder closed = %+v, %v; want none", infos, err)
	}
	// The mark outlived the lock.
	if ans, err := b.TryLockTick(ctx, r); err != nil || ans.Verdict != locking.TickDone {
		t.Fatalf("the same tick after its holder closed = %v, %v; want done", ans.Verdict, err)
	}
}

// A resent call's lease counts from the resend, as its caller believes.
func TestTickResentCallRenewsLease(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	a := memory.New(memory.WithClock(clock.Now))
	b := a.Peer("")
	t.Cleanup(func() { _ = a.Close(ctx); _ = b.Close(ctx) })
	tok, err := locking.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	r := locking.TickRequest{Key: "s", Tick: clock.Now(), TTL: time.Minute, MaxSkew: time.Hour, Token: tok}
	if ans, err := a.TryLockTick(ctx, r); err != nil || ans.Verdict != locking.TickGranted {
		t.Fatalf("TryLockTick = %v, %v", ans.Verdict, err)
	}
	clock.Advance(50 * time.Second)
	if ans, err := a.TryLockTick(ctx, r); err != nil || ans.Verdict != locking.TickGranted {
		t.Fatalf("resent TryLockTick = %v, %v", ans.Verdict, err)
	}
	clock.Advance(50 * time.Second) // 100s after the first call, 50s after the resend
	next := r
	next.Tick, next.Token = r.Tick.Add(time.Second), ""
	if ans, err := b.TryLockTick(ctx, next); err != nil || ans.Verdict != locking.TickContended {
		t.Fatalf("another node's later tick within the resent lease = %v, %v; want contended", ans.Verdict, err)
	}
}
