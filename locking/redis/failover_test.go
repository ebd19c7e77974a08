package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// grants records every granted (key, tick) of a test across all its
// Lockers, failing on the second grant of one: the exactly-once rule.
type grants struct {
	t      *testing.T
	seen   map[string]int64 // key@tick -> fence
	fences map[string]int64 // key -> highest fence seen
}

func newGrants(t *testing.T) *grants {
	return &grants{t: t, seen: map[string]int64{}, fences: map[string]int64{}}
}

// tick asks l for key's tick T and records a grant, checking that the
// tick was never granted before and that the fence rose.
func (g *grants) tick(l *Locker, req locking.TickRequest) (locking.TickAnswer, error) {
	g.t.Helper()
	a, err := l.TryLockTick(context.Background(), req)
	if err != nil || a.Verdict != locking.TickGranted {
		return a, err
	}
	id := locking.TickLockKey(req.Key, req.Tick)
	if f, ok := g.seen[id]; ok {
		g.t.Errorf("tick %s granted twice: fences %d and %d", id, f, a.Handle.Fence())
	}
	g.seen[id] = a.Handle.Fence()
	if prev := g.fences[req.Key]; a.Handle.Fence() <= prev {
		g.t.Errorf("%s: fence %d after %d: fences must increase", id, a.Handle.Fence(), prev)
	}
	g.fences[req.Key] = max(g.fences[req.Key], a.Handle.Fence())
	if us := a.Now.UnixMicro(); a.Handle.Fence() < us {
		g.t.Errorf("%s: fence %d below the server's clock %d µs", id, a.Handle.Fence(), us)
	}
	return a, nil
}

func (g *grants) mustTick(l *Locker, req locking.TickRequest, want locking.TickVerdict) locking.TickAnswer {
	g.t.Helper()
	a, err := g.tick(l, req)
	if err != nil {
		g.t.Fatalf("TryLockTick(%q, %s) = %v", req.Key, req.Tick.Format(time.RFC3339Nano), err)
	}
	if a.Verdict != want {
		g.t.Fatalf("TryLockTick(%q, %s) = %v, want %v", req.Key, req.Tick.Format(time.RFC3339Nano), a.Verdict, want)
	}
	return a
}

// keysPerShard returns n schedule keys for each shard of c, so a test's
// schedules spread over every master.
func keysPerShard(t *testing.T, c *testenv.RedisCluster, prefix string, n int) [][]string {
	t.Helper()
	out := make([][]string, len(c.Masters))
	for i := 0; ; i++ {
		k := fmt.Sprintf("s%d", i)
		sh := c.Shard(t, "{"+k+"}")
		if len(out[sh]) < n {
			out[sh] = append(out[sh], k)
		}
		done := true
		for _, ks := range out {
			done = done && len(ks) == n
		}
		if done {
			return out
		}
		if i > 1000 {
			t.Fatalf("1000 keys did not cover %d shards: %v", len(c.Masters), out)
		}
	}
}

// TestRedisClusterFailover runs try-lock-tick, renew, release and
// take-request through the Cluster client on a real three-master Redis
// Cluster, schedules on every master; then fails shard 0 over to its
// replica (CLUSTER FAILOVER) while its locks are held, and kills shard 2's
// master (SIGKILL, no replica): shard 0's locks survive with rising fences,
// shard 1 never notices, shard 2's keys report ErrUnavailable (the
// scheduler's backend_error) and its held locks cannot be renewed. No tick
// is granted twice throughout.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	c := testenv.StartRedisCluster(t, 3, 1)
	// Registered before the Lockers: runs after their Close.
	t.Cleanup(func() { waitDialRetries(t) })
	ctx := context.Background()
	open := func(holder string) *Locker {
		l := openLocker(t, Options{URL: c.URL(), KeyPrefix: "bext:", Holder: holder, OpTimeout: 2 * time.Second})
		if _, ok := l.client.(*goredis.ClusterClient); !ok {
			t.Fatalf("Open(%s) made a %T, want a Cluster client", c.URL(), l.client)
		}
		return l
	}
	a, b := open("a"), open("b")
	g := newGrants(t)
	shards := keysPerShard(t, c, "bext:", 2)
	t.Logf("keys per shard: %v", shards)

	// Every schedule, on every master: granted once, done for the other
	// node, renewed, released, then the next tick granted to the other.
	t0 := time.Now().Truncate(time.Second)
	held := map[string]*locking.Handle{}
	for _, ks := range shards {
		for _, k := range ks {
			a0 := g.mustTick(a, freq(k, t0), locking.TickGranted)
			g.mustTick(b, freq(k, t0), locking.TickDone)
			if err := a.Release(ctx, a0.Handle); err != nil {
				t.Fatalf("Release(%s) = %v", a0.Handle, err)
			}
			a1 := g.mustTick(b, freq(k, t0.Add(time.Second)), locking.TickGranted)
			if err := b.Release(ctx, a1.Handle); err != nil {
				t.Fatalf("Release(%s) = %v", a1.Handle, err)
			}
			a2 := g.mustTick(a, freq(k, t0.Add(2*time.Second)), locking.TickGranted)
			if err := a.Renew(ctx, a2.Handle); err != nil {
				t.Fatalf("Renew(%s) = %v", a2.Handle, err)
			}
			held[k] = a2.Handle
		}
	}
	// A manual run through the queue on a schedule of each master.
	for _, ks := range shards {
		k := ks[1]
		if err := a.Release(ctx, held[k]); err != nil {
			t.Fatalf("Release(%s) = %v", held[k], err)
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		req := cluster.Request{ID: "r-" + k, Schedule: k, Tick: now, By: "test", At: now}
		if err := a.Enqueue(ctx, []cluster.Request{req}); err != nil {
			t.Fatalf("Enqueue(%s) = %v", k, err)
		}
		tk, err := b.TakeRequest(ctx, cluster.TakeReq{Schedule: k, Node: "b", TTL: time.Minute})
		if err != nil || tk.Handle == nil || tk.Request == nil || tk.Request.ID != req.ID {
			t.Fatalf("TakeRequest(%s) = %+v, %v; want %s with a handle", k, tk, err, req.ID)
		}
		if f := tk.Handle.Fence(); f <= g.fences[k] {
			t.Errorf("TakeRequest(%s) fence %d, not above %d", k, f, g.fences[k])
		}
		g.fences[k] = tk.Handle.Fence()
		held[k] = tk.Handle
		if err := b.Renew(ctx, tk.Handle); err != nil {
			t.Fatalf("Renew(%s) = %v", tk.Handle, err)
		}
	}

	// Shard 0 fails over to its replica, gracefully (the replica catches up
	// first), while its locks are held.
	rep := c.Replicas[0]
	if err := rep.Admin.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", rep.Addr, err)
	}
	if err := testenv.Poll(20*time.Second, func() error {
		if r, err := rep.Role(); err != nil || r != "master" {
			return fmt.Errorf("replica's role %q, %v", r, err)
		}
		if r, err := c.Masters[0].Role(); err != nil || r != "slave" {
			return fmt.Errorf("old master's role %q, %v", r, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("CLUSTER FAILOVER did not complete: %v", err)
	}
	t1 := t0.Add(3 * time.Second)
	for _, k := range shards[0] {
		h := held[k]
		lk := a
		if k == shards[0][1] {
			lk = b
		}
		// The held lock moved with its slot: renewable, and it still
		// keeps the next tick from anyone else.
		if err := lk.Renew(ctx, h); err != nil {
			t.Errorf("Renew(%s) after CLUSTER FAILOVER = %v; the lock should have moved with its slot", h, err)
		}
		g.mustTick(b, freq(k, t0.Add(2*time.Second)), locking.TickDone)
		if k == shards[0][0] {
			g.mustTick(b, freq(k, t1), locking.TickContended)
		}
		if err := lk.Release(ctx, h); err != nil {
			t.Errorf("Release(%s) after CLUSTER FAILOVER = %v", h, err)
		}
		g.mustTick(b, freq(k, t1.Add(time.Second)), locking.TickGranted) // fence checked above the old ones
	}

	// More locks of a on shard 2, so that Close below (which goes through
	// them in no set order) most likely meets the dead master before the
	// live one's lock.
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("extra%d", i)
		if c.Shard(t, "{"+k+"}") == 2 {
			mustLock(t, a, k, time.Minute)
		}
	}

	// Shard 2's master dies, no replica to take over.
	c.Masters[2].Kill()
	t2 := t1.Add(2 * time.Second)
	for sh, ks := range shards {
		for _, k := range ks {
			_, err := g.tick(a, freq(k, t2))
			switch {
			case sh == 2 && !errors.Is(err, locking.ErrUnavailable):
				t.Errorf("TryLockTick(%s) on the killed master = %v, want ErrUnavailable", k, err)
			case sh != 2 && err != nil:
				t.Errorf("TryLockTick(%s) on shard %d with shard 2 dead = %v", k, sh, err)
			}
		}
	}
	for _, k := range shards[2] {
		h := held[k]
		lk := a
		if k == shards[2][1] {
			lk = b
		}
		if err := lk.Renew(ctx, h); !errors.Is(err, locking.ErrUnavailable) {
			t.Errorf("Renew(%s) on the killed master = %v, want ErrUnavailable: the holder must stop", h, err)
		}
	}
	// Shard 1's held lock never noticed.
	k1 := shards[1][0]
	if err := a.Renew(ctx, held[k1]); err != nil {
		t.Errorf("Renew(%s) with another master dead = %v", held[k1], err)
	}
	// Closing gives back the locks on the live masters although those on
	// the dead one cannot be reached.
	if err := a.Close(ctx); !errors.Is(err, locking.ErrUnavailable) {
		t.Errorf("Close with a master dead = %v, want its locks reported ErrUnavailable", err)
	}
	g.mustTick(b, freq(k1, t2.Add(time.Second)), locking.TickGranted)

	// Asking every tick again from the other node grants nothing twice.
	for _, ks := range shards[:2] {
		for _, k := range ks {
			for _, tk := range []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second), t1, t1.Add(time.Second), t2} {
				if _, err := g.tick(b, freq(k, tk)); err != nil {
					t.Errorf("TryLockTick(%s, %v) = %v", k, tk, err)
				}
			}
		}
	}
}

// TestRedisSentinelFailover fails a Sentinel-managed primary over to its
// replica (SENTINEL FAILOVER) while locks are held. Writes the replica had
// are kept: a held lock renews on the new primary and its tick is done for
// everyone else. Writes it never got (its link cut by a proxy just before)
// are lost: a lock taken then reads as lost, and the mark of a tick decided
// then is gone, so only the Floor the scheduler passes (the highest tick it
// saw decided) keeps that tick from running twice. Fences keep increasing
// regardless: the counter is floored at the server's clock.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	var link *faultproxy.Proxy
	s := testenv.StartRedisSentinel(t, func(primary string) string {
		link = faultproxy.Start(t, primary)
		return link.Addr()
	})
	ctx := context.Background()
	l := openLocker(t, Options{URL: s.URL(), KeyPrefix: "bext:", Holder: "a", OpTimeout: 2 * time.Second})
	if _, ok := l.client.(*goredis.Client); !ok {
		t.Fatalf("Open(%s) made a %T, want a failover Client", s.URL(), l.client)
	}
	other := openLocker(t, Options{URL: s.URL(), KeyPrefix: "bext:", Holder: "b", OpTimeout: 2 * time.Second})
	g := newGrants(t)

	t0 := time.Now().Truncate(time.Second)
	t1 := t0.Add(time.Second)
	// held: taken and replicated; kept: T0 run and released, replicated.
	hHeld := g.mustTick(l, freq("held", t0), locking.TickGranted).Handle
	for _, k := range []string{"floor", "nofloor", "late"} {
		h := g.mustTick(l, freq(k, t0), locking.TickGranted).Handle
		if err := l.Release(ctx, h); err != nil {
			t.Fatalf("Release(%s) = %v", h, err)
		}
	}
	if n, err := s.Primary.Admin.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; the replica should have acknowledged", n, err)
	}

	// The replica stops hearing from its primary; what follows is lost.
	link.Blackhole()
	// T1 of floor and nofloor is decided (run, released) on the primary
	// alone; late's T1 is taken and still held.
	var lost []int64
	for _, k := range []string{"floor", "nofloor"} {
		h := g.mustTick(l, freq(k, t1), locking.TickGranted).Handle
		lost = append(lost, h.Fence())
		if err := l.Release(ctx, h); err != nil {
			t.Fatalf("Release(%s) = %v", h, err)
		}
	}
	hLate := g.mustTick(l, freq("late", t1), locking.TickGranted).Handle
	if off, err := s.Replica.Info("replication", "master_repl_offset"); err == nil {
		t.Logf("replica offset %s; primary has more", off)
	}

	if err := s.Sentinel.Admin.Do(ctx, "SENTINEL", "FAILOVER", testenv.SentinelMaster).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	if err := testenv.Poll(30*time.Second, func() error {
		a, err := s.MasterAddr()
		if err != nil || a != s.Replica.Addr {
			return fmt.Errorf("the Sentinel names %q (%v), want %s", a, err, s.Replica.Addr)
		}
		if r, err := s.Replica.Role(); err != nil || r != "master" {
			return fmt.Errorf("replica's role %q, %v", r, err)
		}
		// Each Locker's client follows the Sentinel by itself (its
		// +switch-master subscription closes the connections to the old
		// primary). Until it has, it may still reach the demoted primary,
		// a replica once the Sentinel has demoted it: a write there is
		// refused (READONLY), so no grant, but a read-only verdict (done,
		// contended) may be stale. Before it is demoted, both are masters
		// for a moment. Wait until both Lockers talk to the new primary.
		for _, lk := range []*Locker{l, other} {
			port, err := lk.client.ConfigGet(ctx, "port").Result()
			if err != nil || port["port"] != strconv.Itoa(s.Replica.Port) {
				return fmt.Errorf("a Locker still talks to port %v (%v)", port, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the failover did not complete: %v", err)
	}

	// Replicated: the held lock is still its holder's, T0 is done for
	// everyone, the next tick waits for it, and fences keep rising.
	if err := l.Renew(ctx, hHeld); err != nil {
		t.Errorf("Renew(%s) after the failover = %v; the replica had it", hHeld, err)
	}
	g.mustTick(other, freq("held", t0), locking.TickDone)
	g.mustTick(other, freq("held", t1), locking.TickContended)
	if err := l.Release(ctx, hHeld); err != nil {
		t.Errorf("Release(%s) = %v", hHeld, err)
	}
	g.mustTick(other, freq("held", t1), locking.TickGranted)

	// Lost: the lock taken after the cut is gone; its holder learns it
	// at the next renewal and stops.
	if err := l.Renew(ctx, hLate); !errors.Is(err, locking.ErrLockLost) {
		t.Errorf("Renew(%s) of a lock the replica never got = %v, want ErrLockLost", hLate, err)
	}
	// The mark of floor's T1 is lost too; the scheduler that decided T1
	// passes it as Floor, and T1 stays done. The next tick is granted
	// with a fence above the lost ones although the counter lost them.
	req := freq("floor", t1)
	req.Floor = t1
	g.mustTick(other, req, locking.TickDone)
	g.mustTick(other, freq("floor", t1.Add(time.Second)), locking.TickGranted)
	if f := g.fences["floor"]; f <= lost[0] {
		t.Errorf("fence after the failover %d, not above %d drawn before it", f, lost[0])
	}
	// Without the floor, the lost mark lets T1 be granted again: the
	// limit of an asynchronous replica that the Floor exists for.
	a, err := other.TryLockTick(ctx, freq("nofloor", t1))
	if err != nil {
		t.Fatalf("TryLockTick(nofloor, T1) = %v", err)
	}
	if a.Verdict != locking.TickGranted {
		t.Errorf("TryLockTick(nofloor, T1) without a floor = %v; expected the lost mark to let it through (has the replica lost nothing?)", a.Verdict)
	} else if a.Handle.Fence() <= lost[1] {
		t.Errorf("re-granted T1 fence %d, not above %d drawn before the failover: fencing would not stop the first run", a.Handle.Fence(), lost[1])
	}
}

// freq is a try-lock-tick of key at tick with a minute of skew allowed:
// these tests claim ticks a few seconds ahead of the clock.
func freq(key string, tick time.Time) locking.TickRequest {
	return locking.TickRequest{Key: key, Tick: tick, TTL: testTTL, MaxSkew: time.Minute}
}

// waitDialRetries waits until go-redis has no dial retry left running. A
// pool whose dial failed (a killed master) retries in a goroutine that
// checks once a second whether its pool was closed; the test's goroutine
// leak check would otherwise catch it still asleep.
func waitDialRetries(t *testing.T) {
	err := testenv.Poll(5*time.Second, func() error {
		buf := make([]byte, 1<<20)
		if strings.Contains(string(buf[:runtime.Stack(buf, true)]), "pool.(*ConnPool).tryDial") {
			return fmt.Errorf("a go-redis dial retry is still running")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
