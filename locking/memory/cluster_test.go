package memory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	bcluster "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cluster/clustertest"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// stores hands out, per test, stores (Lockers) sharing one table: nodes of
// one cluster; NewOtherCluster a table of its own.
type stores struct {
	now   func() time.Time
	mu    sync.Mutex
	roots map[testing.TB]*memory.Locker
}

func newStores(now func() time.Time) *stores {
	return &stores{now: now, roots: map[testing.TB]*memory.Locker{}}
}

func (c *stores) New(t testing.TB) bcluster.Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	if root, ok := c.roots[t]; ok {
		return root.Peer("node-n")
	}
	root := memory.New(memory.WithClock(c.now), memory.WithHolder("node-0"))
	c.roots[t] = root
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.roots, t)
	})
	return root
}

// EndLock ends schedule's lock in the table of t's stores: its TTL is
// over.
func (c *stores) EndLock(t testing.TB, _ bcluster.Store, schedule string) {
	c.mu.Lock()
	root, ok := c.roots[t]
	c.mu.Unlock()
	if !ok {
		t.Fatalf("EndLock(%q): this test made no store", schedule)
	}
	root.EndLease(schedule, 0)
}

func (c *stores) NewOtherCluster(testing.TB) bcluster.Store {
	return memory.New(memory.WithClock(c.now))
}

func TestClusterConformance(t *testing.T) {
	clock := newFakeClock()
	c := newStores(clock.Now)
	clustertest.Run(t, clustertest.Backend{
		New:             c.New,
		NewOtherCluster: c.NewOtherCluster,
		Now:             clock.Now,
		Advance:         clock.Advance,
		EndLock:         c.EndLock,
	})
}

// The suite on the real clock too: the time.Now path, and node expiry by
// real waiting.
func TestClusterConformanceRealClock(t *testing.T) {
	c := newStores(time.Now)
	clustertest.Run(t, clustertest.Backend{New: c.New, NewOtherCluster: c.NewOtherCluster, EndLock: c.EndLock})
}

func BenchmarkClusterStore(b *testing.B) {
	c := newStores(time.Now)
	clustertest.Benchmark(b, clustertest.Backend{New: c.New, NewOtherCluster: c.NewOtherCluster})
}

// History memory stays bounded: recording far more than keep runs of many
// schedules keeps at most keep plus a quarter each (memory trims in steps),
// never less than keep, the newest first.
func TestClusterHistoryBounded(t *testing.T) {
	ctx := context.Background()
	l := memory.New()
	t.Cleanup(func() { _ = l.Close(ctx) })
	const keep, schedules = 8, 50
	for k := range 10 * keep {
		batch := make([]bcluster.Run, schedules)
		for i := range batch {
			batch[i] = bcluster.Run{Schedule: fmt.Sprint("s", i), RunID: fmt.Sprint(k),
				StartedAt: time.Unix(int64(k), 0), OutputTail: string(make([]byte, 2*bcluster.MaxOutputTail))}
		}
		if err := l.RecordRuns(ctx, batch, keep); err != nil {
			t.Fatal(err)
		}
	}
	for i := range schedules {
		rs, err := l.Runs(ctx, fmt.Sprint("s", i), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) < keep || len(rs) > keep+keep/4 || rs[0].RunID != fmt.Sprint(10*keep-1) {
			t.Fatalf("s%d: %d runs, newest %q; want %d to %d, newest %d", i, len(rs), rs[0].RunID, keep, keep+keep/4, 10*keep-1)
		}
		for _, r := range rs {
			if len(r.OutputTail) > bcluster.MaxOutputTail {
				t.Fatalf("stored output of %d bytes, want at most %d", len(r.OutputTail), bcluster.MaxOutputTail)
			}
		}
	}
}

// A take's record answers its resends for 2×TTL: a resend after its lock
// expired takes the lock again for the same trigger; past the record's
// keep the token is a fresh take's (the queue's next head).
func TestTakeResentAfterExpiry(t *testing.T) {
	clock := newFakeClock()
	l := memory.New(memory.WithClock(clock.Now))
	ctx := context.Background()
	r1 := bcluster.Request{ID: "t1", Schedule: "job", Tick: clock.Now(), By: "test", At: clock.Now()}
	r2 := bcluster.Request{ID: "t2", Schedule: "job", Tick: clock.Now(), By: "test", At: clock.Now()}
	if err := l.Enqueue(ctx, []bcluster.Request{r1, r2}); err != nil {
		t.Fatal(err)
	}
	take := bcluster.TakeReq{Schedule: "job", Node: "n", TTL: time.Second, Token: "tok"}
	tk, err := l.TakeRequest(ctx, take)
	if err != nil || tk.Handle == nil || tk.Request.ID != "t1" {
		t.Fatalf("TakeRequest = %+v, %v; want t1", tk, err)
	}
	clock.Advance(1500 * time.Millisecond) // the lock expired; the record lives
	tk2, err := l.TakeRequest(ctx, take)
	if err != nil || tk2.Handle == nil || tk2.Request.ID != "t1" || tk2.Handle.Fence() <= tk.Handle.Fence() {
		t.Fatalf("resend after the lock expired = %+v, %v; want t1 under a new fence above %d", tk2, err, tk.Handle.Fence())
	}
	if held, _ := l.Held(ctx, "job"); !held {
		t.Fatal("the resend did not take the lock again")
	}
	clock.Advance(2*time.Second + time.Millisecond) // lock and record (kept 2×TTL from the resend) gone
	// Never heard back (no renewal, no release): t1 went back to the head
	// of its queue, and the token, a fresh take now, takes it from there.
	tk3, err := l.TakeRequest(ctx, take)
	if err != nil || tk3.Handle == nil || tk3.Request.ID != "t1" || tk3.Handle.Fence() <= tk2.Handle.Fence() {
		t.Fatalf("the token resent past its record's keep = %+v, %v; want a fresh take of t1, requeued", tk3, err)
	}
	if q, _ := l.Requests(ctx, "job"); len(q) != 1 || q[0].ID != "t2" {
		t.Fatalf("queue %+v after t1 was taken again, want [t2]", q)
	}
}

// The hole the simulation found (seed 787, holeTakeLost): a trigger's take
// whose replies were all lost, and whose resends all went unanswered,
// removed the trigger from its queue; its taker never heard, and the
// trigger lived only in the take's record until that lapsed: run nowhere.
// Once its lock lapses unheard (no renewal, no release), it goes back to
// the head of its queue and the next take runs it; a take whose taker
// renewed its lock is its taker's, run or not, and is never requeued.
func TestTakeNeverHeardBackIsRequeued(t *testing.T) {
	clock := newFakeClock()
	l := memory.New(memory.WithClock(clock.Now))
	other := l.Peer("node-b")
	ctx := context.Background()
	req := func(id string) bcluster.Request {
		return bcluster.Request{ID: id, Schedule: "job", Tick: clock.Now(), By: "test", At: clock.Now()}
	}
	if err := l.Enqueue(ctx, []bcluster.Request{req("t1"), req("t2"), req("t3")}); err != nil {
		t.Fatal(err)
	}
	// node-a's take of t1: every reply lost, node-a gives up.
	lost, err := l.TakeRequest(ctx, bcluster.TakeReq{Schedule: "job", Node: "node-a", TTL: time.Second, Token: "lost"})
	if err != nil || lost.Request == nil || lost.Request.ID != "t1" {
		t.Fatalf("TakeRequest = %+v, %v; want t1", lost, err)
	}
	clock.Advance(1500 * time.Millisecond) // its lock lapsed unheard
	if q, err := other.Queued(ctx); err != nil || len(q) != 1 || q[0] != "job" {
		t.Fatalf("Queued = %v, %v; want [job]", q, err)
	}
	tk, err := other.TakeRequest(ctx, bcluster.TakeReq{Schedule: "job", Node: "node-b", TTL: time.Second, Token: "b1"})
	if err != nil || tk.Handle == nil || tk.Request.ID != "t1" {
		t.Fatalf("the next take = %+v, %v; want t1, back at the head", tk, err)
	}
	// node-b heard: it renews before it runs t1, then crashes mid-run.
	if err := other.Renew(ctx, tk.Handle); err != nil {
		t.Fatal(err)
	}
	clock.Advance(1500 * time.Millisecond)
	tk2, err := l.TakeRequest(ctx, bcluster.TakeReq{Schedule: "job", Node: "node-a", TTL: time.Second, Token: "a2"})
	if err != nil || tk2.Handle == nil || tk2.Request.ID != "t2" {
		t.Fatalf("the take after node-b's renewed lock lapsed = %+v, %v; want t2 (t1 ran: not again)", tk2, err)
	}
	if q, _ := l.Requests(ctx, "job"); len(q) != 1 || q[0].ID != "t3" {
		t.Fatalf("queue %+v, want [t3]", q)
	}
}
