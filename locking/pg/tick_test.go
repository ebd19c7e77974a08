package pg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

const (
	testSkew   = 5 * time.Second
	testWindow = time.Minute
)

func tickReq(key string, tick time.Time) locking.TickRequest {
	return locking.TickRequest{Key: key, Tick: tick, TTL: time.Minute, MaxSkew: testSkew, Window: testWindow}
}

// dbNow reads the database clock, truncated to the microsecond.
func (c *cluster) dbNow() time.Time {
	c.t.Helper()
	var now time.Time
	if err := c.admin.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		c.t.Fatal(err)
	}
	return now
}

// mark reads key's stored mark (ok false: no row or no mark).
func (c *cluster) mark(key string) (time.Time, bool) {
	c.t.Helper()
	var us *int64
	err := c.admin.QueryRow(context.Background(), `SELECT tick_mark FROM bext_lock_fences WHERE namespace = $1 AND key = $2`, c.ns, key).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && us == nil) {
		return time.Time{}, false
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return time.UnixMicro(*us), true
}

func (c *cluster) exec(q string, args ...any) {
	c.t.Helper()
	if _, err := c.admin.Exec(context.Background(), q, args...); err != nil {
		c.t.Fatalf("%s: %v", q, err)
	}
}

func mustTick(t *testing.T, l *Locker, req locking.TickRequest, want locking.TickVerdict, what string) locking.TickAnswer {
	t.Helper()
	ans, err := l.TryLockTick(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: TryLockTick = %v, want %v", what, err, want)
	}
	if ans.Verdict != want {
		t.Fatalf("%s: verdict %v (mark %v), want %v", what, ans.Verdict, ans.Mark, want)
	}
	if (ans.Handle != nil) != (want == locking.TickGranted) {
		t.Fatalf("%s: verdict %v with handle %v", what, ans.Verdict, ans.Handle)
	}
	return ans
}

// TestTickDecidesAsDecideTick: on states set up directly in the table, the
// statement's verdict and stored mark are locking.DecideTick's, evaluated
// at the database time the statement reports.
func TestTickDecidesAsDecideTick(t *testing.T) {
	c := newCluster(t)
	a, holder := c.open(Options{}), c.open(Options{})
	s := time.Second
	type state struct {
		name   string
		mark   *time.Duration // relative to now; nil: no row
		floor  *time.Duration
		paused bool
		held   bool
		tick   time.Duration
		window time.Duration
	}
	d := func(x time.Duration) *time.Duration { return &x }
	states := []state{
		{name: "no row, T now", tick: 0},
		{name: "no row, T before now-skew", tick: -10 * s},
		{name: "no row, T after now-skew", tick: -3 * s},
		{name: "mark past T", mark: d(-1 * s), tick: -2 * s},
		{name: "mark at T", mark: d(-2 * s), tick: -2 * s},
		{name: "mark before T", mark: d(-30 * s), tick: -1 * s},
		{name: "T ahead within skew", mark: d(-30 * s), tick: 3 * s},
		{name: "T ahead beyond skew", mark: d(-30 * s), tick: 30 * s},
		{name: "paused", mark: d(-30 * s), tick: -1 * s, paused: true},
		{name: "paused, mark past T", mark: d(0), tick: -1 * s, paused: true},
		{name: "missed beyond window", mark: d(-10 * time.Minute), tick: -2 * time.Minute},
		{name: "late within window", mark: d(-10 * time.Minute), tick: -30 * s},
		{name: "late, window zero, beyond skew", mark: d(-10 * time.Minute), tick: -30 * s, window: -1},
		{name: "held", mark: d(-30 * s), tick: -1 * s, held: true},
		{name: "held and missed", mark: d(-10 * time.Minute), tick: -2 * time.Minute, held: true},
		{name: "held and done", mark: d(0), tick: -1 * s, held: true},
		{name: "floor above mark", mark: d(-30 * s), floor: d(-1 * s), tick: -2 * s},
		{name: "floor beyond now is capped", mark: d(-30 * s), floor: d(time.Hour), tick: 3 * s},
		{name: "floor below mark", mark: d(-1 * s), floor: d(-30 * s), tick: -2 * s},
		{name: "no row, floor", floor: d(-1 * s), tick: -2 * s},
	}
	for i, st := range states {
		t.Run(st.name, func(t *testing.T) {
			key := fmt.Sprintf("k%d", i)
			now := c.dbNow()
			if st.mark != nil {
				c.exec(`INSERT INTO bext_lock_fences (namespace, key, fence, tick_mark, paused) VALUES ($1, $2, 0, $3, $4)`,
					c.ns, key, now.Add(*st.mark).UnixMicro(), st.paused)
			}
			var held *locking.Handle
			if st.held {
				held = mustLock(t, holder, key)
			}
			req := tickReq(key, now.Add(st.tick).Truncate(time.Microsecond))
			if st.window < 0 {
				req.Window = 0
			}
			if st.floor != nil {
				req.Floor = now.Add(*st.floor)
			}
			storedMark, hadMark := c.mark(key)
			ans, err := a.TryLockTick(context.Background(), req)
			var ahead *locking.AheadError
			switch {
			case errors.As(err, &ahead):
				if !errors.Is(err, locking.ErrTickAhead) {
					t.Errorf("AheadError does not wrap ErrTickAhead")
				}
				_, _, off := locking.DecideTick(req, now, storedMark, hadMark, st.paused, st.held)
				if off == 0 {
					t.Fatalf("refused as ahead by %v; DecideTick does not refuse", ahead.Offset)
				}
				if m, ok := c.mark(key); m != storedMark || ok != hadMark {
					t.Errorf("an ahead tick changed the mark from %v to %v", storedMark, m)
				}
				return
			case err != nil:
				t.Fatalf("TryLockTick: %v", err)
			}
			v, newMark, off := locking.DecideTick(req, ans.Now, storedMark, hadMark, st.paused, st.held)
			if off != 0 {
				t.Fatalf("verdict %v; DecideTick refuses T as %v ahead", ans.Verdict, off)
			}
			if v == 0 {
				v = locking.TickGranted
			}
			if ans.Verdict != v {
				t.Fatalf("verdict %v, DecideTick says %v (now %v, T %v)", ans.Verdict, v, ans.Now, req.Tick)
			}
			if m, _ := c.mark(key); !m.Equal(newMark) {
				t.Errorf("stored mark %v, DecideTick says %v", m, newMark)
			}
			if !ans.Mark.Equal(newMark) {
				t.Errorf("answered mark %v, DecideTick says %v", ans.Mark, newMark)
			}
			if want := locking.TickBefore(v, storedMark, hadMark); !ans.Before.Equal(want) {
				t.Errorf("%v with Before %v, TickBefore says %v", ans.Verdict, ans.Before, want)
			}
			if lag := time.Since(ans.Now); lag < -time.Second || lag > time.Second {
				t.Errorf("answer's Now %v is %v from this clock", ans.Now, lag)
			}
			if ans.Handle != nil {
				if err := a.Release(context.Background(), ans.Handle); err != nil {
					t.Fatal(err)
				}
			} else if p := c.holderPID(key); p != 0 && !st.held {
				t.Errorf("verdict %v left the advisory lock held by backend %d", ans.Verdict, p)
			}
			if held != nil {
				if err := holder.Release(context.Background(), held); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestTickFloorAfterLostRow: a decided tick never runs again on a node that
// passes it as Floor, whether the row is deleted (a store that lost it) or
// its mark set back (a crash that forgot the last commit).
func TestTickFloorAfterLostRow(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx := context.Background()
	for _, loss := range []string{"deleted", "set back"} {
		key := "k-" + strings.ReplaceAll(loss, " ", "-")
		tick := c.dbNow().Truncate(time.Second)
		ans := mustTick(t, a, tickReq(key, tick), locking.TickGranted, "first")
		if err := a.Release(ctx, ans.Handle); err != nil {
			t.Fatal(err)
		}
		if loss == "deleted" {
			c.exec(`DELETE FROM bext_lock_fences WHERE namespace = $1 AND key = $2`, c.ns, key)
		} else {
			c.exec(`UPDATE bext_lock_fences SET tick_mark = tick_mark - 3600000000 WHERE namespace = $1 AND key = $2`, c.ns, key)
		}
		// Without the floor the row's loss would run T again (within the
		// skew of a missing mark): the floor is what prevents it.
		req := tickReq(key, tick)
		req.Floor = tick
		mustTick(t, b, req, locking.TickDone, loss+", with floor T")
		if m, ok := c.mark(key); !ok || !m.Equal(tick) {
			t.Errorf("%s: mark after the floor = %v (%v), want raised to T %v", loss, m, ok, tick)
		}
		// Now even a node without a floor sees T decided.
		mustTick(t, a, tickReq(key, tick), locking.TickDone, loss+", another node without floor")
	}
}

// The control for TestTickFloorAfterLostRow: without a floor, a deleted row
// does make T grantable again (so the test above can fail).
func TestTickDeletedRowWithoutFloorRegrants(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{})
	tick := c.dbNow().Truncate(time.Second)
	ans := mustTick(t, a, tickReq("k", tick), locking.TickGranted, "first")
	if err := a.Release(context.Background(), ans.Handle); err != nil {
		t.Fatal(err)
	}
	c.exec(`DELETE FROM bext_lock_fences WHERE namespace = $1 AND key = 'k'`, c.ns)
	ans = mustTick(t, a, tickReq("k", tick), locking.TickGranted, "after the row was deleted, no floor")
	if err := a.Release(context.Background(), ans.Handle); err != nil {
		t.Fatal(err)
	}
}

// waitBlocked waits until a try-lock-tick of application_name
// bext-scheduler waits on a lock (a row lock the admin holds), as
// pg_stat_activity shows: its lockRowsSQL, which takes the rows' locks.
// It asks on a connection of its own: the admin's is in the transaction
// holding the row, where pg_stat_activity would be one cached snapshot.
func (c *cluster) waitBlocked() {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		// Asked, not slept on: Postgres is the only one who knows.
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'bext-scheduler' AND wait_event_type = 'Lock' AND datname = current_database()
			AND query = $1`, lockRowsSQL).Scan(&n)
		if err != nil {
			c.t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal("no try-lock-tick statement blocked on the row lock within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTickRedecidesOnLatestRow: a pause or a mark committed while the
// try-lock-tick waits for the row still wins: the rows are locked first
// (lockRowsSQL) and decided by a statement whose snapshot comes after, and
// the advisory lock is never taken for a tick that is not granted. Every
// key must have a row for the statement to wait on it.
func TestTickRedecidesOnLatestRow(t *testing.T) {
	for _, change := range []string{"pause", "mark"} {
		t.Run(change, func(t *testing.T) {
			c := newCluster(t)
			a := c.open(Options{})
			ctx := context.Background()
			if err := a.InitMarks(ctx, []string{"k"}); err != nil {
				t.Fatal(err)
			}
			tick := c.dbNow().Add(time.Second).Truncate(time.Second)
			tx, err := c.admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			q := `UPDATE bext_lock_fences SET paused = true WHERE namespace = $1 AND key = 'k'`
			want := locking.TickPaused
			if change == "mark" {
				q = fmt.Sprintf(`UPDATE bext_lock_fences SET tick_mark = %d WHERE namespace = $1 AND key = 'k'`, tick.UnixMicro())
				want = locking.TickDone
			}
			if _, err := tx.Exec(ctx, q, c.ns); err != nil {
				t.Fatal(err)
			}
			type result struct {
				ans locking.TickAnswer
				err error
			}
			done := make(chan result, 1)
			go func() {
				ans, err := a.TryLockTick(ctx, tickReq("k", tick))
				done <- result{ans, err}
			}()
			c.waitBlocked()
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.ans.Verdict != want {
				t.Fatalf("TryLockTick racing a committed %s = %v, %v; want %v", change, r.ans.Verdict, r.err, want)
			}
			if m, _ := c.mark("k"); !m.Equal(tick) {
				t.Errorf("mark = %v, want T %v", m, tick)
			}
			if p := c.holderPID("k"); p != 0 {
				t.Errorf("the advisory lock of a tick not granted is held by backend %d", p)
			}
		})
	}
}

// TestTickPauseBeforeGrantWins: a pause set before the call consumes the
// tick (the mark is raised, so it is never replayed after resume); Until
// ends it by itself.
func TestTickPauseBeforeGrantWins(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx := context.Background()
	if err := b.SetPause(ctx, "k", locking.Pause{Paused: true, Note: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	p, err := a.GetPause(ctx, "k")
	if err != nil || !p.Paused || p.Note != "maintenance" || !p.Until.IsZero() {
		t.Fatalf("GetPause = %+v, %v", p, err)
	}
	tick := c.dbNow().Truncate(time.Second)
	mustTick(t, a, tickReq("k", tick), locking.TickPaused, "paused key")
	if err := b.SetPause(ctx, "k", locking.Pause{}); err != nil {
		t.Fatal(err)
	}
	mustTick(t, a, tickReq("k", tick), locking.TickDone, "the paused tick after resume")
	ans := mustTick(t, a, tickReq("k", tick.Add(time.Second)), locking.TickGranted, "the next tick after resume")
	if err := a.Release(ctx, ans.Handle); err != nil {
		t.Fatal(err)
	}
	// A pause whose Until has passed pauses nothing.
	until := c.dbNow().Add(-time.Second)
	if err := b.SetPause(ctx, "k", locking.Pause{Paused: true, Until: until}); err != nil {
		t.Fatal(err)
	}
	if p, err := a.GetPause(ctx, "k"); err != nil || !p.Until.Equal(until.Truncate(time.Microsecond)) {
		t.Fatalf("GetPause = %+v, %v; want Until %v", p, err, until)
	}
	ans = mustTick(t, a, tickReq("k", tick.Add(2*time.Second)), locking.TickGranted, "pause expired")
	if err := a.Release(ctx, ans.Handle); err != nil {
		t.Fatal(err)
	}
	if p, err := a.GetPause(ctx, "never-paused"); err != nil || p != (locking.Pause{}) {
		t.Fatalf("GetPause of a key never paused = %+v, %v", p, err)
	}
}

// TestTickInitMarks: one statement creates every missing mark at the
// database clock, leaves existing ones, and a tick from before the load is
// done.
func TestTickInitMarks(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{})
	ctx := context.Background()
	before := c.dbNow()
	old := before.Add(-time.Hour).Truncate(time.Microsecond)
	if err := a.InitMarks(ctx, []string{"warm"}); err != nil { // the table
		t.Fatal(err)
	}
	c.exec(`INSERT INTO bext_lock_fences (namespace, key, fence, tick_mark) VALUES ($1, 'old', 0, $2)`, c.ns, old.UnixMicro())
	if err := a.InitMarks(ctx, []string{"new1", "new2", "old"}); err != nil {
		t.Fatal(err)
	}
	after := c.dbNow()
	for _, k := range []string{"new1", "new2"} {
		m, ok := c.mark(k)
		if !ok || m.Before(before) || m.After(after) {
			t.Errorf("mark of %s = %v (%v), want the database time of InitMarks, in [%v, %v]", k, m, ok, before, after)
		}
		// A tick before the load, within the skew of now, is never run.
		mustTick(t, a, tickReq(k, before.Add(-time.Second)), locking.TickDone, "tick before InitMarks")
	}
	if m, _ := c.mark("old"); !m.Equal(old) {
		t.Errorf("InitMarks moved an existing mark from %v to %v", old, m)
	}
	if err := a.InitMarks(ctx, []string{"bad\nkey"}); !errors.Is(err, locking.ErrInvalid) {
		t.Errorf("InitMarks with a bad key = %v, want ErrInvalid", err)
	}
}

// TestTickPerTickLockKey: a per-tick lock is taken under TickLockKey, the
// mark stays the schedule's.
func TestTickPerTickLockKey(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{})
	tick := c.dbNow().Truncate(time.Second)
	req := tickReq("sched", tick)
	req.PerTick = true
	ans := mustTick(t, a, req, locking.TickGranted, "per tick")
	if c.holderPID(locking.TickLockKey("sched", tick)) == 0 {
		t.Error("no advisory lock under TickLockKey")
	}
	if c.holderPID("sched") != 0 {
		t.Error("the schedule's own lock is held by a per-tick grant")
	}
	if m, _ := c.mark("sched"); !m.Equal(tick) {
		t.Errorf("mark of the schedule = %v, want %v", m, tick)
	}
	if ans.Handle.Key() != "sched" {
		t.Errorf("handle key %q, want the schedule's", ans.Handle.Key())
	}
	if err := a.Release(context.Background(), ans.Handle); err != nil {
		t.Fatal(err)
	}
}

// TestTickSynchronousCommit: the session says synchronous_commit = off
// (every lock session does, for plain fences), yet the statement that
// raises a mark commits durably: once it returned, WAL is flushed past the
// position it wrote at. The statements are lockRowsSQL and tryLockTicksSQL
// with one column added (pg_current_wal_insert_lsn() inside it), sent as
// the Locker sends them (one pgx batch: one transaction); the second also
// reports the setting in force in its own transaction, which must be on.
func TestTickSynchronousCommit(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{})
	ctx := context.Background()
	if err := a.InitMarks(ctx, []string{"warm"}); err != nil { // the table
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A lock session's settings (configureSessions): without jit off a
	// grown table made each statement take seconds, and the ticks went
	// stale before the run ended.
	if _, err := conn.Exec(ctx, `SET synchronous_commit = off; SET jit = off; SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	run := func(sql string) (lagging int) {
		const n = 20
		base := c.dbNow().Add(-time.Second).Truncate(time.Second)
		for i := range n {
			key := fmt.Sprintf("k%d", i)
			var (
				verdict, sc, session string
				lsnIn, flushed       string
				behind               bool
			)
			b := &pgx.Batch{}
			b.Queue(lockRowsSQL, c.ns, []string{key})
			b.Queue(sql, c.ns, "test", "", []string{key}, []int64{lockID(c.ns, key)}, []int64{base.UnixMicro()},
				[]int64{time.Time{}.UnixMicro()}, []int64{testSkew.Microseconds()}, []int64{testWindow.Microseconds()}, []string{"tok"}, []int64{time.Minute.Microseconds()}, []bool{false}, []int64{time.Minute.Microseconds()}, []bool{false}, []bool{true})
			br := conn.SendBatch(ctx, b)
			_, err := br.Exec()
			if err == nil {
				err = br.QueryRow().Scan(new(int64), &verdict, new(*int64), new(*int64), new(*int64), new(int64), new(uint32), &sc, &lsnIn)
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), pg_current_wal_flush_lsn()::text,
				pg_current_wal_flush_lsn() < $1::pg_lsn`, lsnIn).Scan(&session, &flushed, &behind); err != nil {
				t.Fatal(err)
			}
			if verdict != "granted" || session != "off" {
				t.Fatalf("verdict %q, session synchronous_commit %q; want granted, off", verdict, session)
			}
			if sql == tickSQLWithLSN && sc != "on" {
				t.Errorf("synchronous_commit inside the statement = %q, want on", sc)
			}
			if behind {
				lagging++
			}
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
				t.Fatal(err)
			}
		}
		return lagging
	}
	if n := run(tickSQLWithLSN); n > 0 {
		t.Errorf("%d of 20 grants returned before their WAL was flushed: the mark was not committed durably", n)
	}
	// The control: the same statement without set_config leaves the WAL
	// behind at least sometimes (not asserted: a busy server's other
	// commits may flush it first).
	ctl := strings.Replace(tickSQLWithLSN, `set_config('synchronous_commit', 'on', true)`, `'off'`, 1)
	t.Logf("without the set_config, %d of 20 grants returned before their WAL was flushed", run(ctl))
}

var tickSQLWithLSN = strings.Replace(tryLockTicksSQL, "current_setting('synchronous_commit')\nFROM n, i",
	"current_setting('synchronous_commit'), pg_current_wal_insert_lsn()::text\nFROM n, i", 1)

func TestTickSQLWithLSNIsTheStatement(t *testing.T) {
	if tickSQLWithLSN == tryLockTicksSQL {
		t.Fatal("the durability test no longer adds its column to tryLockTicksSQL: update the replacement")
	}
}

// TestTickReentrancy: a key this Locker holds (plain or tick) answers
// contended without asking, and a resend of the holding request is
// answered from its lease.
func TestTickReentrancy(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{MaxSessions: 2})
	ctx := context.Background()
	tick := c.dbNow().Truncate(time.Second)
	h := mustLock(t, a, "k")
	mustTick(t, a, tickReq("k", tick), locking.TickContended, "tick of a key held by plain TryLock")
	if err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	req := tickReq("k", tick)
	req.Token = "resent-token"
	ans := mustTick(t, a, req, locking.TickGranted, "first")
	mustContend(t, a, "k")
	again := mustTick(t, a, req, locking.TickGranted, "resent while held")
	if again.Handle.Fence() != ans.Handle.Fence() {
		t.Errorf("resent fence %d, want %d", again.Handle.Fence(), ans.Handle.Fence())
	}
	if err := a.Release(ctx, again.Handle); err != nil {
		t.Fatal(err)
	}
	mustTick(t, a, req, locking.TickDone, "the same request after release")
}

// TestSessionsRunWithoutJIT: a lock session has jit off and generic plans. The tick
// statement's cost estimate grows with bext_lock_fences (the planner
// multiplies its guesses for (namespace, key) through the CTEs), and past
// jit_above_cost every tick spent seconds compiling.
func TestSessionsRunWithoutJIT(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	h := mustLock(t, l, "k")
	st, err := locking.HandleState(h, l)
	if err != nil {
		t.Fatal(err)
	}
	var jit, plans string
	if err := st.(*lease).sess.conn.QueryRow(context.Background(),
		`SELECT current_setting('jit'), current_setting('plan_cache_mode')`).Scan(&jit, &plans); err != nil {
		t.Fatal(err)
	}
	if jit != "off" || plans != "force_generic_plan" {
		t.Fatalf("jit = %q, plan_cache_mode = %q on a lock session; want off, force_generic_plan", jit, plans)
	}
}
