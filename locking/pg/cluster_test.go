package pg

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// cleanClusterRows deletes a namespace's rows from the cluster tables
// that exist.
func cleanClusterRows(ctx context.Context, t testing.TB, admin *pgx.Conn, ns string) {
	for _, table := range []string{"bext_runs", "bext_run_counts", "bext_nodes", "bext_requests", "bext_accepted", "bext_taken", "bext_taken_heard", "bext_skips"} {
		var exists bool
		if err := admin.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
			t.Logf("cleaning %s: %v", table, err)
			continue
		}
		if !exists {
			continue
		}
		if _, err := admin.Exec(ctx, `DELETE FROM `+table+` WHERE namespace = $1`, ns); err != nil {
			t.Logf("cleaning %s: %v", table, err)
		}
	}
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)

func testRun(schedule string, i int) store.Run {
	return store.Run{
		Schedule:   schedule,
		Tick:       t0.Add(time.Duration(i) * time.Minute),
		Node:       "n1",
		Result:     "success",
		StartedAt:  t0.Add(time.Duration(i)*time.Minute + 7*time.Nanosecond),
		Duration:   1234567 * time.Nanosecond,
		Fence:      int64(1000 + i),
		Manual:     i%2 == 0,
		Attempts:   1 + i%3,
		Error:      "",
		RunID:      fmt.Sprintf("%s-run-%d", schedule, i),
		OutputTail: fmt.Sprintf("out %d", i),
	}
}

func sameRun(t *testing.T, got, want store.Run) {
	t.Helper()
	if !got.Tick.Equal(want.Tick) || !got.StartedAt.Equal(want.StartedAt) {
		t.Errorf("run %s: tick %v started %v, want %v %v", want.RunID, got.Tick, got.StartedAt, want.Tick, want.StartedAt)
	}
	got.Tick, got.StartedAt, want.Tick, want.StartedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Errorf("run:\n got %+v\nwant %+v", got, want)
	}
}

func (c *cluster) count(q string, args ...any) int64 {
	c.t.Helper()
	var n int64
	if err := c.admin.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (c *cluster) storedRuns(schedule string) int64 {
	return c.count(`SELECT count(*) FROM bext_runs WHERE namespace = $1 AND schedule = $2`, c.ns, schedule)
}

func TestClusterRunsRoundTrip(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	var runs []store.Run
	for i := range 5 {
		runs = append(runs, testRun("a", i))
	}
	long := testRun("a", 5)
	long.Error = "first line\nsecond line"
	long.OutputTail = strings.Repeat("x", store.MaxOutputTail) + "tail"
	runs = append(runs, long)
	// Recorded out of order, and one run twice: history is by StartedAt,
	// and a resent batch stores a run once.
	rand.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	if err := l.RecordRuns(ctx, runs, 100); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordRuns(ctx, runs[:2], 100); err != nil {
		t.Fatal(err)
	}
	got, err := l.Runs(ctx, "a", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Fatalf("Runs = %d runs, want 6", len(got))
	}
	for i, r := range got {
		sameRun(t, r, store.Bound(testRunOr(long, 5-i)))
	}
	if got[0].Error != "first line" || len(got[0].OutputTail) != store.MaxOutputTail || !strings.HasSuffix(got[0].OutputTail, "tail") {
		t.Errorf("bounded run: error %q, tail of %d bytes", got[0].Error, len(got[0].OutputTail))
	}
	if got, err := l.Runs(ctx, "a", 2); err != nil || len(got) != 2 || got[0].RunID != "a-run-5" || got[1].RunID != "a-run-4" {
		t.Errorf("Runs(limit 2) = %v, %v; want runs 5 and 4", got, err)
	}
	if got, err := l.Runs(ctx, "none", 10); err != nil || len(got) != 0 {
		t.Errorf("Runs(none) = %v, %v; want none", got, err)
	}
	if err := l.RecordRuns(ctx, []store.Run{{Schedule: "a"}}, 100); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RecordRuns(no run id) = %v, want ErrInvalid", err)
	}
}

func testRunOr(last store.Run, i int) store.Run {
	if i == 5 {
		return last
	}
	return testRun("a", i)
}

// TestClusterTrimDeferred: a history grows past keep and is trimmed back to
// keep only once it passes keep + keep/10, never per insert, and keeps the
// newest by StartedAt.
func TestClusterTrimDeferred(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	const keep = 20 // threshold 22
	var sizes []int64
	for i := range 60 {
		if err := l.RecordRuns(ctx, []store.Run{testRun("a", i)}, keep); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, c.storedRuns("a"))
	}
	var trims int
	for i, n := range sizes {
		if n > trimThreshold(keep) {
			t.Fatalf("after %d runs the history holds %d, over %d", i+1, n, trimThreshold(keep))
		}
		if i > 0 && n != sizes[i-1]+1 {
			trims++ // the run did not just add a row
		}
	}
	// 60 runs: trimmed at runs 23, 26, ..., 59, every slack+1 = 3 runs.
	if trims != 13 {
		t.Errorf("history sizes %v: %d trims, want 13 (one every 3 runs)", sizes, trims)
	}
	got, err := l.Runs(ctx, "a", keep)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if want := fmt.Sprintf("a-run-%d", 59-i); r.RunID != want {
			t.Fatalf("Runs[%d] = %s, want %s", i, r.RunID, want)
		}
	}
}

// TestClusterTrimRanksBatch: a batch over the bound, recorded out of order
// and older than some stored runs, leaves the newest keep of stored and
// batch together.
func TestClusterTrimRanksBatch(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	const keep = 5
	var first []store.Run
	for i := 0; i < 30; i += 3 { // 0, 3, ..., 27
		first = append(first, testRun("a", i))
	}
	if err := l.RecordRuns(ctx, first, keep); err != nil {
		t.Fatal(err)
	}
	if n := c.storedRuns("a"); n != keep {
		t.Fatalf("a first batch of 10 with keep 5 stored %d runs, want 5", n)
	}
	var second []store.Run
	for i := 1; i < 30; i += 3 { // 1, 4, ..., 28
		second = append(second, testRun("a", i))
	}
	rand.Shuffle(len(second), func(i, j int) { second[i], second[j] = second[j], second[i] })
	if err := l.RecordRuns(ctx, second, keep); err != nil {
		t.Fatal(err)
	}
	got, err := l.Runs(ctx, "a", 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.RunID)
	}
	want := []string{"a-run-28", "a-run-27", "a-run-25", "a-run-24", "a-run-22"}
	if !slices.Equal(ids, want) {
		t.Errorf("history = %v, want %v", ids, want)
	}
}

func TestClusterLastRuns(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	var runs []store.Run
	for i := range 10 {
		runs = append(runs, testRun("a", i), testRun("b", 20-i))
	}
	if err := l.RecordRuns(ctx, runs, 100); err != nil {
		t.Fatal(err)
	}
	got, err := l.LastRuns(ctx, []string{"a", "b", "c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"].RunID != "a-run-9" || got["b"].RunID != "b-run-20" {
		t.Errorf("LastRuns = %v, want a-run-9 and b-run-20 only", got)
	}
	sameRun(t, got["a"], testRun("a", 9))
}

func TestClusterNodes(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	var dbNow time.Time
	if err := c.admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	b := store.Node{NodeID: "b", Version: "1.2", StartedAt: t0, ConfigHash: "h1", Schedules: map[string]string{"x": "1", "y": "2"}}
	a := store.Node{NodeID: "a", Version: "1.3", StartedAt: t0.Add(time.Second), ConfigHash: "h2"}
	gone := store.Node{NodeID: "gone", Version: "1.0"}
	for _, n := range []store.Node{b, a} {
		if err := l.Announce(ctx, n, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// Announced, then its lease run out (set back by the operator's
	// connection rather than waited for).
	if err := l.Announce(ctx, gone, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.Exec(ctx, `UPDATE bext_nodes SET expires_at = clock_timestamp() - interval '1 second'
		WHERE namespace = $1 AND node_id = 'gone'`, c.ns); err != nil {
		t.Fatal(err)
	}
	got, err := l.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].NodeID != "a" || got[1].NodeID != "b" {
		t.Fatalf("Nodes = %+v, want a and b", got)
	}
	for _, n := range got {
		if n.LastSeen.Before(dbNow) || n.LastSeen.After(dbNow.Add(time.Minute)) {
			t.Errorf("node %s last seen %v, the database clock read %v before", n.NodeID, n.LastSeen, dbNow)
		}
	}
	if g := got[1]; g.Version != "1.2" || !g.StartedAt.Equal(t0) || g.ConfigHash != "h1" || g.Schedules["y"] != "2" || len(g.Schedules) != 2 {
		t.Errorf("node b = %+v", g)
	}
	// The next announcement forgets the expired node's row.
	if err := l.Announce(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := c.count(`SELECT count(*) FROM bext_nodes WHERE namespace = $1 AND node_id = 'gone'`, c.ns); n != 0 {
		t.Errorf("an expired node's row is still stored")
	}
	if err := l.Leave(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Nodes(ctx); err != nil || len(got) != 1 || got[0].NodeID != "b" {
		t.Errorf("after Leave(a): Nodes = %+v, %v; want b", got, err)
	}
}

func trigger(id, schedule string) store.Request {
	return store.Request{ID: id, Schedule: schedule, Tick: t0, By: "test", At: t0.Add(time.Nanosecond)}
}

func backfill(id, schedule string, i int) store.Request {
	return store.Request{ID: id, Schedule: schedule, Tick: t0.Add(time.Duration(i) * time.Minute), Backfill: true, By: "test", At: t0}
}

func TestClusterQueue(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	reqs := []store.Request{trigger("t1", "a"), backfill("b1", "a", 1), backfill("b2", "a", 2), trigger("t2", "c")}
	if err := l.Enqueue(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	// Resent: stored once.
	if err := l.Enqueue(ctx, reqs[:1]); err != nil {
		t.Fatal(err)
	}
	if q, err := l.Queued(ctx); err != nil || !slices.Equal(q, []string{"a", "c"}) {
		t.Errorf("Queued = %v, %v; want [a c]", q, err)
	}
	got, err := l.Requests(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Requests(a) = %+v, want 3", got)
	}
	for i, r := range got {
		w := reqs[i]
		if r.ID != w.ID || r.Schedule != w.Schedule || !r.Tick.Equal(w.Tick) || r.Backfill != w.Backfill || r.By != w.By || !r.At.Equal(w.At) {
			t.Errorf("Requests[%d] = %+v, want %+v", i, r, w)
		}
	}
	// A second backfill of a: refused, and nothing of the batch is stored.
	err = l.Enqueue(ctx, []store.Request{trigger("t3", "d"), backfill("b3", "a", 3)})
	if !errors.Is(err, store.ErrBusy) {
		t.Errorf("Enqueue(second backfill) = %v, want ErrBusy", err)
	}
	if got, _ := l.Requests(ctx, "d"); len(got) != 0 {
		t.Errorf("a refused batch stored %+v", got)
	}
	// A trigger while a backfill is queued is fine.
	if err := l.Enqueue(ctx, []store.Request{trigger("t4", "a")}); err != nil {
		t.Errorf("Enqueue(trigger during a backfill) = %v", err)
	}
	if err := l.Enqueue(ctx, []store.Request{{Schedule: "a"}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Enqueue(no id) = %v, want ErrInvalid", err)
	}
}

// TestClusterBackfillEnqueueRace: of 8 concurrent Enqueues of a backfill
// of one schedule, exactly one is stored.
func TestClusterBackfillEnqueueRace(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	const n = 8
	lockers := make([]*Locker, n)
	for i := range lockers {
		lockers[i] = c.open(Options{MaxSessions: 2})
		if err := lockers[i].Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		oks  int
		errs []error
	)
	start := make(chan struct{})
	for i, l := range lockers {
		wg.Go(func() {
			<-start
			err := l.Enqueue(ctx, []store.Request{backfill(fmt.Sprintf("b%d-1", i), "a", 1), backfill(fmt.Sprintf("b%d-2", i), "a", 2)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				oks++
			case !errors.Is(err, store.ErrBusy):
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if oks != 1 || len(errs) > 0 {
		t.Fatalf("%d Enqueues stored their backfill (want 1), errors %v", oks, errs)
	}
	if got, _ := lockers[0].Requests(ctx, "a"); len(got) != 2 {
		t.Errorf("queue holds %d requests, want 2", len(got))
	}
}

func TestClusterTakeTrigger(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{Holder: "a"}), c.open(Options{Holder: "b"})
	ctx := context.Background()

	// An empty queue takes no lock.
	tk, err := a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute})
	if err != nil || tk.Request != nil || tk.Handle != nil || tk.Contended {
		t.Fatalf("TakeRequest(empty) = %+v, %v; want nothing", tk, err)
	}
	if held, err := a.Held(ctx, "s"); err != nil || held {
		t.Fatalf("Held after an empty take = %v, %v", held, err)
	}

	// The fence goes on from the key's last TryLock.
	h0 := mustLock(t, b, "s")
	if err := b.Release(ctx, h0); err != nil {
		t.Fatal(err)
	}
	if err := a.Enqueue(ctx, []store.Request{trigger("t1", "s"), trigger("t2", "s")}); err != nil {
		t.Fatal(err)
	}
	if node, err := b.Accepted(ctx, "s", "t1"); err != nil || node != "" {
		t.Errorf("Accepted before any take = %q, %v", node, err)
	}
	tk, err = a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute})
	if err != nil || tk.Request == nil || tk.Handle == nil || tk.Contended {
		t.Fatalf("TakeRequest = %+v, %v; want t1 with a handle", tk, err)
	}
	if tk.Request.ID != "t1" || tk.Handle.Key() != "s" || tk.Handle.Fence() <= h0.Fence() {
		t.Errorf("took %+v with handle %v (fence %d, the last TryLock's %d)", tk.Request, tk.Handle, tk.Handle.Fence(), h0.Fence())
	}
	// Taken in the same step: gone from the queue, accepted by node-a, the
	// lock held (b contends for it, by TryLock and by TakeRequest).
	if got, _ := b.Requests(ctx, "s"); len(got) != 1 || got[0].ID != "t2" {
		t.Errorf("queue after the take = %+v, want t2 only", got)
	}
	if node, err := b.Accepted(ctx, "s", "t1"); err != nil || node != "node-a" {
		t.Errorf("Accepted(t1) = %q, %v; want node-a", node, err)
	}
	if held, err := b.Held(ctx, "s"); err != nil || !held {
		t.Errorf("Held while taken = %v, %v", held, err)
	}
	mustContend(t, b, "s")
	// Contended answers carry the head.
	if tk2, err := b.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-b", TTL: time.Minute}); err != nil || tk2.Request == nil || tk2.Request.ID != "t2" || tk2.Handle != nil || !tk2.Contended {
		t.Errorf("TakeRequest by b while a holds = %+v, %v; want contended, head t2", tk2, err)
	}
	// a itself answers contended without asking (its session would say yes).
	if tk2, err := a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute}); err != nil || tk2.Request == nil || tk2.Request.ID != "t2" || tk2.Handle != nil || !tk2.Contended {
		t.Errorf("TakeRequest by the holder = %+v, %v; want contended, head t2", tk2, err)
	}
	if got, _ := b.Requests(ctx, "s"); len(got) != 1 {
		t.Errorf("contended takes changed the queue: %+v", got)
	}
	// The handle is the Locker's own lease.
	if err := a.Renew(ctx, tk.Handle); err != nil {
		t.Errorf("Renew = %v", err)
	}
	if err := a.Release(ctx, tk.Handle); err != nil {
		t.Errorf("Release = %v", err)
	}
	if held, err := b.Held(ctx, "s"); err != nil || held {
		t.Errorf("Held after Release = %v, %v", held, err)
	}
	tk, err = b.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-b", TTL: time.Minute})
	if err != nil || tk.Request == nil || tk.Request.ID != "t2" {
		t.Fatalf("TakeRequest after release = %+v, %v; want t2", tk, err)
	}
	if err := b.Release(ctx, tk.Handle); err != nil {
		t.Error(err)
	}
	// Lost by its session: Renew says so.
	if err := a.Enqueue(ctx, []store.Request{trigger("t3", "s")}); err != nil {
		t.Fatal(err)
	}
	tk, err = a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute})
	if err != nil || tk.Handle == nil {
		t.Fatalf("TakeRequest(t3) = %+v, %v", tk, err)
	}
	c.kill("s")
	if err := a.Renew(ctx, tk.Handle); !errors.Is(err, locking.ErrLockLost) {
		t.Errorf("Renew after the session was killed = %v, want ErrLockLost", err)
	}
	if q, _ := a.Queued(ctx); len(q) != 0 {
		t.Errorf("Queued = %v, want none", q)
	}
}

func TestClusterTakeBackfill(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx := context.Background()
	reqs := []store.Request{backfill("b1", "s", 1), backfill("b2", "s", 2)}
	if err := a.Enqueue(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	tk, err := a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute})
	if err != nil || tk.Request == nil || tk.Request.ID != "b1" || !tk.Request.Backfill {
		t.Fatalf("TakeRequest = %+v, %v; want b1", tk, err)
	}
	// The tick stays queued while it runs; a node that dies mid-run leaves
	// it to another.
	if got, _ := b.Requests(ctx, "s"); len(got) != 2 {
		t.Errorf("queue while b1 runs: %+v, want both", got)
	}
	c.kill("s")
	tk2, err := b.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-b", TTL: time.Minute})
	if err != nil || tk2.Request == nil || tk2.Request.ID != "b1" {
		t.Fatalf("TakeRequest after the holder died = %+v, %v; want b1 again", tk2, err)
	}
	if node, _ := a.Accepted(ctx, "s", "b1"); node != "node-b" {
		t.Errorf("Accepted(b1) = %q, want node-b", node)
	}
	if err := b.Done(ctx, *tk2.Request); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, tk2.Handle); err != nil {
		t.Fatal(err)
	}
	tk3, err := a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute})
	if err != nil || tk3.Request == nil || tk3.Request.ID != "b2" {
		t.Fatalf("TakeRequest after Done = %+v, %v; want b2", tk3, err)
	}
	if err := a.Done(ctx, *tk3.Request); err != nil {
		t.Fatal(err)
	}
	// Done of a trigger is a no-op.
	if err := a.Done(ctx, trigger("t", "s")); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, tk3.Handle); err != nil {
		t.Fatal(err)
	}
	if q, _ := a.Queued(ctx); len(q) != 0 {
		t.Errorf("Queued after the backfill = %v", q)
	}
	// Once done, a new backfill may be queued.
	if err := a.Enqueue(ctx, []store.Request{backfill("b9", "s", 9)}); err != nil {
		t.Errorf("Enqueue after the backfill ended = %v", err)
	}
}

// TestClusterTakeRace: 32 nodes take one trigger at once: exactly one gets
// it, several rounds; the others see contended or an empty queue.
func TestClusterTakeRace(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	const n = 32
	lockers := make([]*Locker, n)
	for i := range lockers {
		lockers[i] = c.open(Options{MaxSessions: 2})
		if err := lockers[i].Ping(ctx); err != nil { // a ready session each
			t.Fatal(err)
		}
	}
	for round := range 5 {
		id := fmt.Sprintf("t%d", round)
		if err := lockers[0].Enqueue(ctx, []store.Request{trigger(id, "s")}); err != nil {
			t.Fatal(err)
		}
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			takers []int
			errs   []error
		)
		start := make(chan struct{})
		for i, l := range lockers {
			wg.Go(func() {
				<-start
				tk, err := l.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: fmt.Sprintf("node-%d", i), TTL: time.Minute})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				if tk.Handle != nil {
					takers = append(takers, i)
					if tk.Request.ID != id {
						errs = append(errs, fmt.Errorf("node %d took %q, want %q", i, tk.Request.ID, id))
					}
					// Given back at once, so the lock does not stop a
					// second taker: only the trigger leaving the queue in
					// the taking step does.
					if err := l.Release(ctx, tk.Handle); err != nil {
						errs = append(errs, err)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if len(takers) != 1 || len(errs) > 0 {
			t.Fatalf("round %d: nodes %v took the trigger (want exactly one), errors %v", round, takers, errs)
		}
		if node, _ := lockers[0].Accepted(ctx, "s", id); node != fmt.Sprintf("node-%d", takers[0]) {
			t.Errorf("Accepted(%s) = %q, node %d took it", id, node, takers[0])
		}
	}
}

// TestClusterBackfillRunsOnce: 8 nodes work through a 30-tick backfill at
// once, each looping take, run, Done, Release: every tick runs exactly
// once, in order. A node that read the queue before the previous holder's
// Done must not run that tick again.
func TestClusterBackfillRunsOnce(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	const nodes, ticks = 8, 30
	lockers := make([]*Locker, nodes)
	for i := range lockers {
		lockers[i] = c.open(Options{MaxSessions: 2})
	}
	var reqs []store.Request
	for i := range ticks {
		reqs = append(reqs, backfill(fmt.Sprintf("b%02d", i), "s", i))
	}
	if err := lockers[0].Enqueue(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ran  []string
		errs []error
	)
	for i, l := range lockers {
		wg.Go(func() {
			for {
				tk, err := l.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: fmt.Sprintf("node-%d", i), TTL: time.Minute})
				if err == nil && tk.Handle != nil {
					mu.Lock()
					ran = append(ran, tk.Request.ID)
					mu.Unlock()
					err = errors.Join(l.Done(ctx, *tk.Request), l.Release(ctx, tk.Handle))
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if tk.Request == nil && !tk.Contended {
					return // the queue is empty
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var want []string
	for _, r := range reqs {
		want = append(want, r.ID)
	}
	if !slices.Equal(ran, want) {
		t.Errorf("ran %v\nwant %v", ran, want)
	}
}

// TestClusterNamespaces: two clusters sharing the database see none of each
// other's state, for the same schedule and node ids.
func TestClusterNamespaces(t *testing.T) {
	c1, c2 := newCluster(t), newCluster(t)
	l1, l2 := c1.open(Options{}), c2.open(Options{})
	ctx := context.Background()
	if err := l1.RecordRuns(ctx, []store.Run{testRun("s", 1)}, 100); err != nil {
		t.Fatal(err)
	}
	if err := l1.Announce(ctx, store.Node{NodeID: "n"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l1.Enqueue(ctx, []store.Request{trigger("t1", "s"), backfill("b1", "s", 1)}); err != nil {
		t.Fatal(err)
	}
	tk, err := l1.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "n", TTL: time.Minute})
	if err != nil || tk.Handle == nil {
		t.Fatalf("TakeRequest = %+v, %v", tk, err)
	}
	defer func() { _ = l1.Release(ctx, tk.Handle) }()

	if got, err := l2.Runs(ctx, "s", 100); err != nil || len(got) != 0 {
		t.Errorf("other namespace: Runs = %v, %v", got, err)
	}
	if got, err := l2.LastRuns(ctx, []string{"s"}); err != nil || len(got) != 0 {
		t.Errorf("other namespace: LastRuns = %v, %v", got, err)
	}
	if got, err := l2.Nodes(ctx); err != nil || len(got) != 0 {
		t.Errorf("other namespace: Nodes = %v, %v", got, err)
	}
	if got, err := l2.Queued(ctx); err != nil || len(got) != 0 {
		t.Errorf("other namespace: Queued = %v, %v", got, err)
	}
	if got, err := l2.Requests(ctx, "s"); err != nil || len(got) != 0 {
		t.Errorf("other namespace: Requests = %v, %v", got, err)
	}
	if node, err := l2.Accepted(ctx, "s", "t1"); err != nil || node != "" {
		t.Errorf("other namespace: Accepted = %q, %v", node, err)
	}
	if held, err := l2.Held(ctx, "s"); err != nil || held {
		t.Errorf("other namespace: Held = %v, %v", held, err)
	}
	// Its own backfill is not refused by the other's, and its trigger is
	// taken although the other namespace holds "s".
	if err := l2.Enqueue(ctx, []store.Request{backfill("b1", "s", 1), trigger("t1", "s")}); err != nil {
		t.Errorf("other namespace: Enqueue = %v", err)
	}
	tk2, err := l2.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "n", TTL: time.Minute})
	if err != nil || tk2.Request == nil || tk2.Request.ID != "b1" {
		t.Fatalf("other namespace: TakeRequest = %+v, %v", tk2, err)
	}
	if err := l2.Release(ctx, tk2.Handle); err != nil {
		t.Error(err)
	}
	// The first namespace's rows are untouched.
	if got, _ := l1.Requests(ctx, "s"); len(got) != 1 || got[0].ID != "b1" {
		t.Errorf("first namespace's queue = %+v, want b1", got)
	}
	if got, _ := l1.Runs(ctx, "s", 100); len(got) != 1 {
		t.Errorf("first namespace's runs = %+v", got)
	}
}

// TestTakeResentWhileFirstSessionHolds: a take whose reply was lost with
// its connection leaves the lock with the first attempt's session until
// Postgres drops it. A resend meanwhile (here from another Locker, as a
// node whose pool opened a new session) cannot tell that session's end:
// it answers ErrResendHeld, not definite, and changes nothing. Once the
// session ended, the resend takes the lock again for the same trigger.
func TestTakeResentWhileFirstSessionHolds(t *testing.T) {
	c := newCluster(t)
	l1, l2 := c.open(Options{}), c.open(Options{})
	ctx := context.Background()
	if err := l1.Enqueue(ctx, []store.Request{trigger("t1", "s"), trigger("t2", "s")}); err != nil {
		t.Fatal(err)
	}
	take := store.TakeReq{Schedule: "s", Node: "n", TTL: time.Minute, Token: "tok"}
	tk, err := l1.TakeRequest(ctx, take)
	if err != nil || tk.Handle == nil || tk.Request.ID != "t1" {
		t.Fatalf("TakeRequest = %+v, %v; want t1", tk, err)
	}
	// The reply is "lost": l1 keeps its session, the caller resends.
	tk2, err := l2.TakeRequest(ctx, take)
	if !errors.Is(err, locking.ErrResendHeld) || !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("resend while the first session holds the lock = %+v, %v; want ErrResendHeld", tk2, err)
	}
	if got, _ := l2.Requests(ctx, "s"); len(got) != 1 || got[0].ID != "t2" {
		t.Fatalf("queue after a held resend = %+v, want t2 alone", got)
	}
	// The first session ends (its node's connection is gone).
	if err := l1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tk3, err := l2.TakeRequest(ctx, take)
	if err != nil || tk3.Handle == nil || tk3.Request == nil || tk3.Request.ID != "t1" {
		t.Fatalf("resend once the first session ended = %+v, %v; want t1 taken again", tk3, err)
	}
	if tk3.Handle.Fence() <= tk.Handle.Fence() {
		t.Errorf("fence of the lock taken again %d, want above the first's %d", tk3.Handle.Fence(), tk.Handle.Fence())
	}
	if got, _ := l2.Requests(ctx, "s"); len(got) != 1 || got[0].ID != "t2" {
		t.Errorf("queue after the resend = %+v, want t2 alone", got)
	}
	if err := l2.Release(ctx, tk3.Handle); err != nil {
		t.Error(err)
	}
}
