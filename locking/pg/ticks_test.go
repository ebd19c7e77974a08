package pg

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/locking"
)

// TestTryLockTicksOneRoundTrip: a batch of mixed requests is one request
// on a warm session; each is answered as TryLockTick answers it (granted,
// done, paused, contended by another node, contended by its twin in the
// batch), the grants are held on the session (renew and release work),
// and the watch hears each raised mark.
func TestTryLockTicksOneRoundTrip(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 1})
	other := c.open(Options{})
	var writes atomic.Int64
	l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return countingConn{Conn: conn, writes: &writes}, nil
	}
	heard, listening := watching(t, other)
	waitListening(t, listening)
	ctx := context.Background()
	now := c.dbNow().Truncate(time.Second)
	warm := mustTick(t, l, tickReq("warm", now), locking.TickGranted, "warm-up")
	expectMark(t, heard, "warm", now)
	if err := l.Release(ctx, warm.Handle); err != nil {
		t.Fatal(err)
	}
	first := mustTick(t, l, tickReq("done", now), locking.TickGranted, "done, first")
	expectMark(t, heard, "done", now)
	if err := l.Release(ctx, first.Handle); err != nil {
		t.Fatal(err)
	}
	mustTick(t, other, tickReq("held", now.Add(-time.Second)), locking.TickGranted, "held elsewhere")
	expectMark(t, heard, "held", now.Add(-time.Second))
	if err := l.SetPause(ctx, "paused", locking.Pause{Paused: true}); err != nil {
		t.Fatal(err)
	}

	reqs := []locking.TickRequest{tickReq("zeta", now), tickReq("done", now), tickReq("paused", now),
		tickReq("held", now), tickReq("alpha", now), tickReq("zeta", now.Add(time.Millisecond))}
	want := []locking.TickVerdict{locking.TickGranted, locking.TickDone, locking.TickPaused,
		locking.TickContended, locking.TickGranted, locking.TickContended}
	writes.Store(0)
	answers, errs := l.TryLockTicks(ctx, reqs)
	if n := writes.Load(); n != 1 {
		t.Errorf("TryLockTicks of %d requests sent %d requests, want 1", len(reqs), n)
	}
	for i := range reqs {
		if errs[i] != nil || answers[i].Verdict != want[i] || (answers[i].Handle != nil) != (want[i] == locking.TickGranted) {
			t.Fatalf("request %d (%s at %v): %v, handle %v, %v; want %v",
				i, reqs[i].Key, reqs[i].Tick, answers[i].Verdict, answers[i].Handle, errs[i], want[i])
		}
	}
	// Told in the batch's (key) order, once it committed.
	expectMark(t, heard, "alpha", now)
	expectMark(t, heard, "paused", now)
	expectMark(t, heard, "zeta", now)
	expectSilence(t, heard)
	for _, i := range []int{0, 4} {
		h := answers[i].Handle
		if c.holderPID(reqs[i].Key) == 0 {
			t.Fatalf("%s granted but not held", reqs[i].Key)
		}
		if err := l.Renew(ctx, h); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if p := c.holderPID(reqs[i].Key); p != 0 {
			t.Fatalf("%s still held by %d after Release", reqs[i].Key, p)
		}
	}
}

// TestTryLockTicksRace: three nodes batch the same 300 ticks at once,
// keys in different orders: every tick is granted exactly once, and no
// batch fails (their row locks are taken in one order: no deadlock).
func TestTryLockTicksRace(t *testing.T) {
	c := newCluster(t)
	const n = 300
	now := c.dbNow().Truncate(time.Second)
	var (
		mu      sync.Mutex
		granted = map[string]int{}
		wg      sync.WaitGroup
	)
	for node := range 3 {
		l := c.open(Options{})
		reqs := make([]locking.TickRequest, n)
		for i := range reqs {
			k := i
			if node == 1 {
				k = n - 1 - i
			}
			reqs[i] = tickReq(fmt.Sprintf("k%03d", k), now)
		}
		wg.Go(func() {
			answers, errs := l.TryLockTicks(context.Background(), reqs)
			mu.Lock()
			defer mu.Unlock()
			for i := range reqs {
				switch {
				case errs[i] != nil:
					t.Errorf("node %d, %s: %v", node, reqs[i].Key, errs[i])
				case answers[i].Verdict == locking.TickGranted:
					granted[reqs[i].Key]++
				case answers[i].Verdict != locking.TickDone && answers[i].Verdict != locking.TickContended:
					t.Errorf("node %d, %s: %v", node, reqs[i].Key, answers[i].Verdict)
				}
			}
		})
	}
	wg.Wait()
	for i := range n {
		if k := fmt.Sprintf("k%03d", i); granted[k] != 1 {
			t.Errorf("%s granted %d times, want once", k, granted[k])
		}
	}
}

// TestTryLockTicksSameRowTwice: per-tick requests of one schedule for two
// ticks in one batch share the schedule's row (the mark) but not a lock
// id; the batch decides them one after the other, exactly as two
// TryLockTicks in that order decide them on a twin namespace.
func TestTryLockTicksSameRowTwice(t *testing.T) {
	now := newCluster(t).dbNow().Truncate(time.Second)
	perTick := func(key string, tick time.Time) locking.TickRequest {
		r := tickReq(key, tick)
		r.PerTick = true
		return r
	}
	for _, order := range []string{"rising", "falling"} {
		t.Run(order, func(t *testing.T) {
			first, second := now.Add(-2*time.Second), now.Add(-time.Second)
			if order == "falling" {
				first, second = second, first
			}
			reqs := []locking.TickRequest{perTick("k", first), tickReq("other", now), perTick("k", second)}
			verdicts := func(answers []locking.TickAnswer, errs []error) (out []string) {
				for i := range answers {
					out = append(out, fmt.Sprintf("%v %v mark=%v", answers[i].Verdict, errs[i], answers[i].Mark.UnixMicro()))
				}
				return out
			}
			batched := newCluster(t)
			got := verdicts(batched.open(Options{}).TryLockTicks(context.Background(), reqs))
			alone := newCluster(t)
			l := alone.open(Options{})
			var answers []locking.TickAnswer
			var errs []error
			for _, r := range reqs {
				a, err := l.TryLockTick(context.Background(), r)
				answers, errs = append(answers, a), append(errs, err)
			}
			want := verdicts(answers, errs)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("batched %v\nalone   %v", got, want)
			}
			latest := first
			if second.After(first) {
				latest = second
			}
			if m, _ := batched.mark("k"); !m.Equal(latest) {
				t.Errorf("mark of k = %v, want %v", m, latest)
			}
		})
	}
}

// TestInitMarksWarmsSessions: after InitMarks, a burst's concurrent
// batches find their sessions open and their statements prepared: they
// connect nothing and each sends one request.
func TestInitMarksWarmsSessions(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	var dials, writes atomic.Int64
	l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		dials.Add(1)
		return countingConn{Conn: conn, writes: &writes}, nil
	}
	ctx := context.Background()
	keys := make([]string, 4*warmSessions)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	if err := l.InitMarks(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if n := l.openSessions(); n != warmSessions {
		t.Fatalf("%d sessions open after InitMarks, want %d", n, warmSessions)
	}
	dials.Store(0)
	writes.Store(0)
	now := c.dbNow() // after the marks InitMarks set: not done yet
	var wg sync.WaitGroup
	for g := range warmSessions {
		wg.Go(func() {
			answers, errs := l.TryLockTicks(ctx, []locking.TickRequest{tickReq(keys[4*g], now), tickReq(keys[4*g+1], now)})
			for i := range answers {
				if errs[i] != nil || answers[i].Verdict != locking.TickGranted {
					t.Errorf("batch %d, request %d: %v, %v", g, i, answers[i].Verdict, errs[i])
				}
			}
		})
	}
	wg.Wait()
	if n := dials.Load(); n != 0 {
		t.Errorf("the burst connected %d sessions, want none", n)
	}
	if n := writes.Load(); n != warmSessions {
		t.Errorf("%d batches sent %d requests, want one each (statements prepared)", warmSessions, n)
	}
}

// openSessions is how many sessions l has open.
func (l *Locker) openSessions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sessions)
}

// TestTickBatchLooksUpEachRow: tryLockTicksSQL finds each request's row by
// its whole key, whatever the planner guesses. Planned generically (as
// every lock session plans) on a table whose statistics say it is small,
// a join on (namespace, key) was run as a scan of the namespace with the
// key as a join filter, once per request: quadratic, a batch of 500 took
// 140-190 ms instead of 10, and a burst's batches up to 1.3 s. The test
// counts what EXPLAIN ANALYZE says the statement filtered out of joins,
// on a batch of 200 with a freshly analyzed table, in a transaction it
// rolls back.
func TestTickBatchLooksUpEachRow(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	const n = 200
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	if err := l.InitMarks(ctx, keys); err != nil {
		t.Fatal(err)
	}
	c.exec(`ANALYZE bext_lock_fences`)
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan; SET jit = off`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = tx.Rollback(ctx)
		_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	}()
	if _, err := tx.Exec(ctx, `PREPARE tick_batch(text, text, text, text[], bigint[], bigint[], bigint[], bigint[], bigint[], text[], bigint[], boolean[], bigint[], boolean[], boolean[]) AS `+tryLockTicksSQL); err != nil {
		t.Fatal(err)
	}
	ids, ticks, zeros, skews, tokens := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]string, n)
	tick := c.dbNow().Add(time.Second).UnixMicro()
	for i := range keys {
		ids[i], ticks[i], skews[i], tokens[i] = lockID(c.ns, keys[i]), tick, testSkew.Microseconds(), fmt.Sprintf("t%d", i)
	}
	if _, err := tx.Exec(ctx, lockRowsSQL, c.ns, keys); err != nil {
		t.Fatal(err)
	}
	plan := explain(t, tx, `EXECUTE tick_batch($1, 'h', '', $2, $3, $4, $5, $6, $6, $7, $6, $8, $6, $8, $8)`,
		c.ns, keys, ids, ticks, zeros, skews, tokens, make([]bool, n))
	for _, line := range plan {
		if strings.Contains(line, "Rows Removed by Join Filter") {
			t.Fatalf("the tick batch filters rows out of a join (a request's row not looked up by its key):\n%s", strings.Join(plan, "\n"))
		}
	}
}
