package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// clusterFixture is a Locker on the shared test Redis under a prefix of
// its own, with an admin client to look behind its back.
type clusterFixture struct {
	url    string
	admin  *goredis.Client
	prefix string
	l      *Locker
}

func newClusterFixture(t *testing.T) *clusterFixture {
	t.Helper()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	return &clusterFixture{url: url, admin: admin, prefix: prefix,
		l: openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "test", OpTimeout: 10 * time.Second})}
}

// another opens a second Locker (another node) on the same prefix.
func (f *clusterFixture) another(t *testing.T, holder string) *Locker {
	return openLocker(t, Options{URL: f.url, KeyPrefix: f.prefix, Holder: holder, OpTimeout: 10 * time.Second})
}

func testRun(schedule, id string, started time.Time) cluster.Run {
	return cluster.Run{
		Schedule: schedule, Tick: started.Truncate(time.Second), Node: "n1", Result: "success",
		StartedAt: started, Duration: 1500 * time.Microsecond, Fence: 42, Attempts: 1,
		RunID: id, OutputTail: "ok\n",
	}
}

// t0 is a fixed time of microsecond precision, what history keeps.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC)

func TestRecordRunsNewestFirstAndBounded(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	// Recorded out of order, across two batches: history is ordered by
	// StartedAt, not by arrival (nodes flush their batches at different
	// times).
	var first, second []cluster.Run
	for i := range 10 {
		r := testRun("s", fmt.Sprintf("r%d", i), t0.Add(time.Duration(i)*time.Second))
		if i%2 == 0 {
			first = append(first, r)
		} else {
			second = append(second, r)
		}
	}
	if err := f.l.RecordRuns(ctx, second, 5); err != nil {
		t.Fatal(err)
	}
	if err := f.l.RecordRuns(ctx, first, 5); err != nil {
		t.Fatal(err)
	}
	got, err := f.l.Runs(ctx, "s", 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.RunID)
	}
	if want := "r9 r8 r7 r6 r5"; strings.Join(ids, " ") != want {
		t.Errorf("Runs = %v, want %s (the newest 5, newest first)", ids, want)
	}
	if n := f.admin.ZCard(ctx, f.l.lockKey("s")+runsSuffix).Val(); n != 5 {
		t.Errorf("the history holds %d runs, want keep = 5", n)
	}
	// Every field comes back, times to the microsecond.
	want := testRun("s", "r9", t0.Add(9*time.Second))
	g := got[0]
	if !g.StartedAt.Equal(want.StartedAt) || !g.Tick.Equal(want.Tick) || g.Duration != want.Duration ||
		g.Node != want.Node || g.Result != want.Result || g.Fence != want.Fence || g.Attempts != want.Attempts ||
		g.OutputTail != want.OutputTail || g.Schedule != "s" {
		t.Errorf("Runs[0] = %+v, want %+v", g, want)
	}
	if got, _ := f.l.Runs(ctx, "s", 2); len(got) != 2 || got[0].RunID != "r9" {
		t.Errorf("Runs(limit 2) = %v", got)
	}
}

func TestRecordRunsResendStoredOnce(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	r := testRun("s", "r1", t0)
	for range 2 {
		if err := f.l.RecordRuns(ctx, []cluster.Run{r}, 10); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := f.l.Runs(ctx, "s", 10); len(got) != 1 {
		t.Errorf("a run recorded twice (a resent batch) is in history %d times, want 1", len(got))
	}
}

func TestRecordRunsBoundsFields(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	r := testRun("s", "r1", t0)
	r.Error = "first line\nsecond line"
	r.OutputTail = strings.Repeat("x", 3*cluster.MaxOutputTail) + "end"
	if err := f.l.RecordRuns(ctx, []cluster.Run{r}, 10); err != nil {
		t.Fatal(err)
	}
	got, err := f.l.Runs(ctx, "s", 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("Runs = %v, %v", got, err)
	}
	if got[0].Error != "first line" || len(got[0].OutputTail) != cluster.MaxOutputTail || !strings.HasSuffix(got[0].OutputTail, "end") {
		t.Errorf("stored error %q, output tail of %d bytes; want the first line and the last %d bytes", got[0].Error, len(got[0].OutputTail), cluster.MaxOutputTail)
	}
}

func TestLastRunsManySchedules(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	// More schedules than one pipelined batch holds.
	n := lastRunsBatch + 20
	var runs []cluster.Run
	var ids []string
	for i := range n {
		s := fmt.Sprintf("sched-%d", i)
		ids = append(ids, s)
		if i%3 == 0 {
			continue // no history
		}
		runs = append(runs, testRun(s, s+"/old", t0), testRun(s, s+"/new", t0.Add(time.Minute)))
	}
	if err := f.l.RecordRuns(ctx, runs, 10); err != nil {
		t.Fatal(err)
	}
	last, err := f.l.LastRuns(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range ids {
		r, ok := last[s]
		switch {
		case i%3 == 0 && ok:
			t.Errorf("LastRuns has %q, which has no history", s)
		case i%3 != 0 && (!ok || r.RunID != s+"/new"):
			t.Errorf("LastRuns[%q] = %v, %v; want its newest run", s, r.RunID, ok)
		}
	}
}

func TestHistoryInvalid(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	for name, err := range map[string]error{
		"keep 0":    f.l.RecordRuns(ctx, []cluster.Run{testRun("s", "r", t0)}, 0),
		"no run id": f.l.RecordRuns(ctx, []cluster.Run{testRun("s", "", t0)}, 1),
		"no sched":  f.l.RecordRuns(ctx, []cluster.Run{testRun("", "r", t0)}, 1),
		"limit 0": func() error {
			_, err := f.l.Runs(ctx, "s", 0)
			return err
		}(),
	} {
		if !errors.Is(err, cluster.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestNodes(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	before := f.admin.Time(ctx).Val()
	for _, id := range []string{"b", "a", "c"} {
		n := cluster.Node{NodeID: id, Version: "v1", StartedAt: t0, ConfigHash: "h-" + id,
			Schedules: map[string]string{"s": "x"}}
		if err := f.l.Announce(ctx, n, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err := f.l.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 || nodes[0].NodeID != "a" || nodes[2].NodeID != "c" {
		t.Fatalf("Nodes = %+v, want a, b, c", nodes)
	}
	a := nodes[0]
	if a.Version != "v1" || a.ConfigHash != "h-a" || !a.StartedAt.Equal(t0) || a.Schedules["s"] != "x" ||
		a.LastSeen.Before(before.Truncate(time.Microsecond)) {
		t.Errorf("node a = %+v, want it as announced, last seen at the server's time (>= %v)", a, before)
	}
	if pttl := f.admin.PTTL(ctx, f.l.clusterKey(nodesSuffix)).Val(); pttl <= 0 || pttl > time.Minute {
		t.Errorf("the nodes hash expires in %v, want within the longest ttl (1m)", pttl)
	}

	// b's announcement ran out: its last seen is set back a minute and a
	// second on the server, as if it had stopped announcing then.
	nk := f.l.clusterKey(nodesSuffix)
	v := f.admin.HGet(ctx, nk, "b").Val()
	seen, rest, _ := strings.Cut(v, "|")
	var us int64
	fmt.Sscan(seen, &us)
	f.admin.HSet(ctx, nk, "b", fmt.Sprintf("%d|%s", us-61_000_000, rest))
	if err := f.l.Leave(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	nodes, err = f.l.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].NodeID != "a" {
		t.Errorf("Nodes = %+v, want only a (b expired, c left)", nodes)
	}
	if f.admin.HExists(ctx, nk, "b").Val() {
		t.Errorf("the expired node b is still stored")
	}
}

func trigger(schedule, id string) cluster.Request {
	return cluster.Request{ID: id, Schedule: schedule, Tick: t0, By: "test", At: t0}
}

func backfill(schedule, id string, tick time.Time) cluster.Request {
	return cluster.Request{ID: id, Schedule: schedule, Tick: tick, Backfill: true, By: "test", At: t0}
}

func TestTakeTrigger(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	if err := f.l.Enqueue(ctx, []cluster.Request{trigger("s", "t1"), trigger("s", "t2")}); err != nil {
		t.Fatal(err)
	}
	if q, _ := f.l.Queued(ctx); len(q) != 1 || q[0] != "s" {
		t.Errorf("Queued = %v, want [s]", q)
	}
	if reqs, _ := f.l.Requests(ctx, "s"); len(reqs) != 2 || reqs[0].ID != "t1" || !reqs[0].Tick.Equal(t0) {
		t.Errorf("Requests = %+v, want t1, t2", reqs)
	}
	// The fence is the schedule's: above one drawn before, and at least
	// the server's clock in µs.
	h := mustLock(t, f.l, "s", time.Minute)
	if err := f.l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	now := f.admin.Time(ctx).Val()
	tk, err := f.l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "node-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if tk.Request == nil || tk.Request.ID != "t1" || tk.Handle == nil || tk.Contended {
		t.Fatalf("TakeRequest = %+v, want t1 with a handle", tk)
	}
	if tk.Handle.Fence() <= h.Fence() || tk.Handle.Fence() < now.UnixMicro() || tk.Handle.Key() != "s" {
		t.Errorf("taken fence %d on %q, want the schedule's, above %d and >= %d", tk.Handle.Fence(), tk.Handle.Key(), h.Fence(), now.UnixMicro())
	}
	if held, _ := f.l.Held(ctx, "s"); !held {
		t.Errorf("Held = false while the request's lock is held")
	}
	if node, _ := f.l.Accepted(ctx, "s", "t1"); node != "node-1" {
		t.Errorf("Accepted(t1) = %q, want node-1", node)
	}
	if node, _ := f.l.Accepted(ctx, "s", "t2"); node != "" {
		t.Errorf("Accepted(t2) = %q before anyone took it", node)
	}
	if ttl := f.admin.TTL(ctx, f.l.lockKey("s")+acceptedSuffix+"t1").Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("the accepted record expires in %v, want a day", ttl)
	}
	// The trigger left the queue in the same step.
	if reqs, _ := f.l.Requests(ctx, "s"); len(reqs) != 1 || reqs[0].ID != "t2" {
		t.Errorf("Requests after the take = %+v, want only t2", reqs)
	}
	// Another node finds the lock held: contended, shown the head, no lock.
	other := f.another(t, "other")
	tk2, err := other.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "node-2", TTL: time.Minute})
	if err != nil || !tk2.Contended || tk2.Handle != nil || tk2.Request == nil || tk2.Request.ID != "t2" {
		t.Errorf("TakeRequest while held = %+v, %v; want contended on t2", tk2, err)
	}
	if err := f.l.Release(ctx, tk.Handle); err != nil {
		t.Fatal(err)
	}
	tk2, err = other.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "node-2", TTL: time.Minute})
	if err != nil || tk2.Handle == nil || tk2.Request.ID != "t2" {
		t.Fatalf("TakeRequest once free = %+v, %v; want t2", tk2, err)
	}
	// The queue ran empty: the schedule left the index.
	if q, _ := f.l.Queued(ctx); len(q) != 0 {
		t.Errorf("Queued = %v with every queue empty", q)
	}
	if err := other.Release(ctx, tk2.Handle); err != nil {
		t.Fatal(err)
	}
	tk3, err := f.l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "node-1", TTL: time.Minute})
	if err != nil || tk3 != (cluster.Taken{}) {
		t.Errorf("TakeRequest on an empty queue = %+v, %v; want nothing", tk3, err)
	}
	if held, _ := f.l.Held(ctx, "s"); held {
		t.Errorf("an empty queue's take left the lock held")
	}
}

func TestTakeBackfill(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	bf := []cluster.Request{backfill("s", "b1", t0), backfill("s", "b2", t0.Add(time.Minute))}
	if err := f.l.Enqueue(ctx, bf); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Enqueue(ctx, []cluster.Request{backfill("s", "b3", t0)}); !errors.Is(err, cluster.ErrBusy) {
		t.Errorf("a second backfill: %v, want ErrBusy", err)
	}
	if err := f.l.Enqueue(ctx, []cluster.Request{trigger("s", "t1")}); err != nil {
		t.Errorf("a trigger behind a backfill: %v", err)
	}
	tk, err := f.l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "node-1", TTL: time.Minute})
	if err != nil || tk.Handle == nil || tk.Request.ID != "b1" || !tk.Request.Backfill {
		t.Fatalf("TakeRequest = %+v, %v; want b1", tk, err)
	}
	// The node taking b1 dies: its lock expires, b1 is still the head.
	if err := f.admin.Del(ctx, f.l.lockKey("s")).Err(); err != nil {
		t.Fatal(err)
	}
	other := f.another(t, "other")
	tk2, err := other.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "node-2", TTL: time.Minute})
	if err != nil || tk2.Handle == nil || tk2.Request.ID != "b1" {
		t.Fatalf("TakeRequest after the taker died = %+v, %v; want b1 again", tk2, err)
	}
	// Done for a trigger changes nothing (a backfill's Done removes it
	// wherever it is: the conformance case Backfill/DoneNotAtTheHead).
	if err := other.Done(ctx, trigger("s", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := other.Done(ctx, *tk2.Request); err != nil {
		t.Fatal(err)
	}
	if reqs, _ := f.l.Requests(ctx, "s"); len(reqs) != 2 || reqs[0].ID != "b2" || reqs[1].ID != "t1" {
		t.Errorf("Requests after Done(b1) = %+v, want b2, t1", reqs)
	}
	if err := other.Release(ctx, tk2.Handle); err != nil {
		t.Fatal(err)
	}
	tk3, err := other.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "node-2", TTL: time.Minute})
	if err != nil || tk3.Request.ID != "b2" {
		t.Fatalf("TakeRequest = %+v, %v; want b2", tk3, err)
	}
	if err := other.Done(ctx, *tk3.Request); err != nil {
		t.Fatal(err)
	}
	// No backfill queued any more: a new one is accepted.
	if err := f.l.Enqueue(ctx, []cluster.Request{backfill("s", "b4", t0)}); err != nil {
		t.Errorf("a backfill once the last one is done: %v", err)
	}
	_ = other.Release(ctx, tk3.Handle)
}

// TestTakeRequestRace: 32 nodes (each its own Locker and connection) race
// for two queued triggers, round after round: exactly one node takes one,
// the first, and the lock it holds keeps the second queued.
func TestTakeRequestRace(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	const nodes, rounds = 32, 10
	lockers := make([]*Locker, nodes)
	for i := range lockers {
		lockers[i] = f.another(t, fmt.Sprintf("node-%d", i))
		if err := lockers[i].Ping(ctx); err != nil { // dial before the race
			t.Fatal(err)
		}
	}
	for round := range rounds {
		id := fmt.Sprintf("t%d", round)
		if err := f.l.Enqueue(ctx, []cluster.Request{trigger("s", id), trigger("s", id+"-next")}); err != nil {
			t.Fatal(err)
		}
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
			won   []int
		)
		for i, l := range lockers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tk, err := l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: fmt.Sprintf("node-%d", i), TTL: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if tk.Handle != nil {
					mu.Lock()
					won = append(won, i)
					mu.Unlock()
					if tk.Request == nil || tk.Request.ID != id {
						t.Errorf("node %d took %+v, want %s", i, tk.Request, id)
					}
					// Hold the lock past the race, as a run does; released below.
					t.Cleanup(func() { _ = l.Release(context.Background(), tk.Handle) })
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d nodes took the trigger (%v), want exactly 1", round, len(won), won)
		}
		node, _ := f.l.Accepted(ctx, "s", id)
		if node != fmt.Sprintf("node-%d", won[0]) {
			t.Errorf("round %d: Accepted = %q, want node-%d", round, node, won[0])
		}
		if reqs, _ := f.l.Requests(ctx, "s"); len(reqs) != 1 || reqs[0].ID != id+"-next" {
			t.Errorf("round %d: left queued %+v, want only %s-next", round, reqs, id)
		}
		// Free the lock and the queue for the next round.
		if err := f.admin.Del(ctx, f.l.lockKey("s"), f.l.lockKey("s")+requestsSuffix).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTakeResendAnswersTheFirstTake runs take.lua twice with one token, as
// go-redis does when the connection broke before the reply: the resend
// must answer with the request the first run took, not take the next one
// (the first trigger would be lost: popped, accepted, run by nobody).
func TestTakeResendAnswersTheFirstTake(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	if err := f.l.Enqueue(ctx, []cluster.Request{trigger("s", "t1"), trigger("s", "t2")}); err != nil {
		t.Fatal(err)
	}
	lk := f.l.lockKey("s")
	run := func() (int64, int64, string, int64) {
		v, err := takeScript.Run(ctx, f.admin, []string{lk, lk + fenceSuffix, lk + requestsSuffix, lk + takenSuffix + "tok"},
			"tok", "|n1", 60000, "n1", lk+acceptedSuffix, 120000).Result()
		if err != nil {
			t.Fatal(err)
		}
		code, fence, head, left, err := takeReply(v)
		if err != nil {
			t.Fatal(err)
		}
		return code, fence, head, left
	}
	c1, f1, h1, _ := run()
	c2, f2, h2, left := run()
	if c1 != takeTaken || c2 != takeTaken || f1 != f2 || h1 != h2 || !strings.Contains(h2, `"id":"t1"`) {
		t.Errorf("take, then its resend = (%d, %d, %s), (%d, %d, %s); want t1 taken with one fence twice", c1, f1, h1, c2, f2, h2)
	}
	if left != 2 {
		t.Errorf("the resend left %d requests, want 2 (t2 still queued, t1 pending until its taker is heard)", left)
	}
}

// TestClusterNamespaces: two prefixes on one server share nothing.
func TestClusterNamespaces(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	other := openLocker(t, Options{URL: f.url, KeyPrefix: testPrefix(t, f.admin)})
	if err := f.l.RecordRuns(ctx, []cluster.Run{testRun("s", "r1", t0)}, 10); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Announce(ctx, cluster.Node{NodeID: "n1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Enqueue(ctx, []cluster.Request{trigger("s", "t1"), backfill("s", "b1", t0)}); err != nil {
		t.Fatal(err)
	}
	tk, err := f.l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "n1", TTL: time.Minute})
	if err != nil || tk.Handle == nil {
		t.Fatalf("TakeRequest = %+v, %v", tk, err)
	}
	runs, _ := other.Runs(ctx, "s", 10)
	last, _ := other.LastRuns(ctx, []string{"s"})
	nodes, _ := other.Nodes(ctx)
	queued, _ := other.Queued(ctx)
	reqs, _ := other.Requests(ctx, "s")
	acc, _ := other.Accepted(ctx, "s", "t1")
	held, _ := other.Held(ctx, "s")
	if len(runs)+len(last)+len(nodes)+len(queued)+len(reqs) != 0 || acc != "" || held {
		t.Errorf("another prefix sees runs %v, last %v, nodes %v, queued %v, requests %v, accepted %q, held %v; want nothing",
			runs, last, nodes, queued, reqs, acc, held)
	}
	if err := other.Enqueue(ctx, []cluster.Request{backfill("s", "b2", t0)}); err != nil {
		t.Errorf("a backfill under another prefix: %v (the first prefix's backfill is not its own)", err)
	}
	tk2, err := other.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "n2", TTL: time.Minute})
	if err != nil || tk2.Handle == nil || tk2.Request.ID != "b2" {
		t.Errorf("TakeRequest under another prefix = %+v, %v; want its own b2, not contended", tk2, err)
	}
}

// TestListSkipsClusterState: `locks` shows locks only, not the history,
// queues, records and nodes kept next to them.
func TestListSkipsClusterState(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	if err := f.l.RecordRuns(ctx, []cluster.Run{testRun("s", "r1", t0)}, 10); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Announce(ctx, cluster.Node{NodeID: "n1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Enqueue(ctx, []cluster.Request{trigger("s", "t1"), trigger("s", "t2")}); err != nil {
		t.Fatal(err)
	}
	// With a token: its record (kept for resends) is no lock either.
	tk, err := f.l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "n1", TTL: time.Minute, Token: "tok-1"})
	if err != nil || tk.Handle == nil {
		t.Fatalf("TakeRequest = %+v, %v", tk, err)
	}
	var keys []string
	iter := f.admin.Scan(ctx, 0, globEscape(f.prefix)+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) < 7 {
		t.Fatalf("only %d keys stored (%v): the test does not cover every kind", len(keys), keys)
	}
	infos, err := f.l.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != "s" || infos[0].Fence != tk.Handle.Fence() {
		t.Errorf("List = %+v over keys %v; want only the lock of s", infos, keys)
	}
}

func TestClusterClosed(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	if err := f.l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, err1 := f.l.Runs(ctx, "s", 1)
	_, err2 := f.l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "n", TTL: time.Minute})
	err3 := f.l.Announce(ctx, cluster.Node{NodeID: "n"}, time.Minute)
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, locking.ErrClosed) {
			t.Errorf("call %d after Close: %v, want ErrClosed", i, err)
		}
	}
}

// TestRunStoredUnescaped: output is stored as is, not JSON-escaped (each
// '<' as \u003c would cost 6 bytes of Redis memory instead of one).
func TestRunStoredUnescaped(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	r := testRun("s", "r1", t0)
	r.OutputTail = "line\n<html> & more"
	if err := f.l.RecordRuns(ctx, []cluster.Run{r}, 10); err != nil {
		t.Fatal(err)
	}
	m := f.admin.ZRange(ctx, f.l.lockKey("s")+runsSuffix, 0, -1).Val()
	if len(m) != 1 || !strings.HasSuffix(m[0], "}\nline\n<html> & more") {
		t.Errorf("stored %q, want the output tail unescaped", m)
	}
	if got, _ := f.l.Runs(ctx, "s", 1); len(got) != 1 || got[0].OutputTail != r.OutputTail {
		t.Errorf("Runs = %+v, want the tail back", got)
	}
}

// TestClusterUnreachable: with Redis down every method fails with
// ErrUnavailable within the operation timeout; none hangs or reports an
// empty answer as if all were well.
func TestClusterUnreachable(t *testing.T) {
	t.Parallel()
	const opTimeout = 300 * time.Millisecond
	l := openLocker(t, Options{URL: "redis://" + closedAddr(t) + "/0", OpTimeout: opTimeout})
	ctx := context.Background()
	calls := map[string]func() error{
		"RecordRuns": func() error { return l.RecordRuns(ctx, []cluster.Run{testRun("s", "r", t0)}, 10) },
		"Runs":       func() error { _, err := l.Runs(ctx, "s", 10); return err },
		"LastRuns":   func() error { _, err := l.LastRuns(ctx, []string{"s"}); return err },
		"Announce":   func() error { return l.Announce(ctx, cluster.Node{NodeID: "n"}, time.Minute) },
		"Nodes":      func() error { _, err := l.Nodes(ctx); return err },
		"Leave":      func() error { return l.Leave(ctx, "n") },
		"Enqueue":    func() error { return l.Enqueue(ctx, []cluster.Request{trigger("s", "t")}) },
		"Queued":     func() error { _, err := l.Queued(ctx); return err },
		"Requests":   func() error { _, err := l.Requests(ctx, "s"); return err },
		"TakeRequest": func() error {
			_, err := l.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "n", TTL: time.Minute})
			return err
		},
		"Done":     func() error { return l.Done(ctx, backfill("s", "b", t0)) },
		"Accepted": func() error { _, err := l.Accepted(ctx, "s", "t"); return err },
		"Held":     func() error { _, err := l.Held(ctx, "s"); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		if elapsed := time.Since(start); elapsed >= 3*opTimeout {
			t.Errorf("%s with Redis down took %v, want < 3 × OpTimeout", name, elapsed)
		}
		if !errors.Is(err, locking.ErrUnavailable) {
			t.Errorf("%s with Redis down = %v, want ErrUnavailable", name, err)
		}
	}
}

// TestEnqueueBusyStoresNoTrigger: a call with a trigger of one schedule and
// a refused backfill of another stores neither.
func TestEnqueueBusyStoresNoTrigger(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	if err := f.l.Enqueue(ctx, []cluster.Request{backfill("b", "b1", t0)}); err != nil {
		t.Fatal(err)
	}
	err := f.l.Enqueue(ctx, []cluster.Request{trigger("a", "t1"), backfill("b", "b2", t0)})
	if !errors.Is(err, cluster.ErrBusy) {
		t.Fatalf("Enqueue = %v, want ErrBusy", err)
	}
	if reqs, _ := f.l.Requests(ctx, "a"); len(reqs) != 0 {
		t.Errorf("the refused call stored %+v for a", reqs)
	}
}

// TestTakeResentAfterExpiry: a resent take whose lock expired (deleted
// here, as expiry does) takes the lock again for its trigger; once
// another holds the lock, a resend gives the trigger back to its queue,
// and the index of queued schedules lists it, so a polling node finds it.
func TestTakeResentAfterExpiry(t *testing.T) {
	t.Parallel()
	f := newClusterFixture(t)
	ctx := context.Background()
	if err := f.l.Enqueue(ctx, []cluster.Request{trigger("s", "t1")}); err != nil {
		t.Fatal(err)
	}
	take := cluster.TakeReq{Schedule: "s", Node: "n1", TTL: time.Minute, Token: "tok"}
	tk, err := f.l.TakeRequest(ctx, take)
	if err != nil || tk.Handle == nil || tk.Request.ID != "t1" {
		t.Fatalf("TakeRequest = %+v, %v; want t1", tk, err)
	}
	if ttl := f.admin.PTTL(ctx, f.l.lockKey("s")+takenSuffix+"tok").Val(); ttl <= time.Minute || ttl > 2*time.Minute {
		t.Errorf("the take's record expires in %v, want 2×TTL", ttl)
	}
	// Not heard back yet (no renewal, no release): the schedule stays
	// indexed, its trigger pending, until it is (take.lua).
	if q, _ := f.l.Queued(ctx); len(q) != 1 || q[0] != "s" {
		t.Fatalf("Queued = %v after the only trigger was taken, not heard back; want [s]", q)
	}
	if err := f.admin.Del(ctx, f.l.lockKey("s")).Err(); err != nil {
		t.Fatal(err)
	}
	tk2, err := f.l.TakeRequest(ctx, take)
	if err != nil || tk2.Handle == nil || tk2.Request.ID != "t1" || tk2.Handle.Fence() <= tk.Handle.Fence() {
		t.Fatalf("resend after the lock expired = %+v, %v; want t1 under a new fence above %d", tk2, err, tk.Handle.Fence())
	}
	if err := f.admin.Del(ctx, f.l.lockKey("s")).Err(); err != nil {
		t.Fatal(err)
	}
	other := f.another(t, "other")
	h := mustLock(t, other, "s", time.Minute)
	tk3, err := f.l.TakeRequest(ctx, take)
	if err != nil || !tk3.Contended || tk3.Handle != nil || tk3.Request == nil || tk3.Request.ID != "t1" {
		t.Fatalf("resend while another holds the lock = %+v, %v; want contended on t1", tk3, err)
	}
	if q, _ := f.l.Queued(ctx); len(q) != 1 || q[0] != "s" {
		t.Errorf("Queued = %v after t1 went back to its queue, want [s]", q)
	}
	if err := other.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	tk4, err := other.TakeRequest(ctx, cluster.TakeReq{Schedule: "s", Node: "n2", TTL: time.Minute, Token: "tok2"})
	if err != nil || tk4.Handle == nil || tk4.Request.ID != "t1" {
		t.Fatalf("a fresh take once free = %+v, %v; want t1", tk4, err)
	}
	_ = other.Release(ctx, tk4.Handle)
}
