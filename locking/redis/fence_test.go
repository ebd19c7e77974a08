package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/pg"
)

// TestFenceMonotoneAfterCounterSetBack: a counter set back (an AOF
// everysec crash lost its last INCRs, a lagging replica was promoted) must
// not hand out a fence already given, by TryLock or by TryLockTick.
func TestFenceMonotoneAfterCounterSetBack(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	ctx := context.Background()
	fk := l.lockKey("job") + fenceSuffix

	var highest int64
	draw := func(how string, tick bool) {
		t.Helper()
		var h *locking.Handle
		if tick {
			h = mustTick(t, l, tickReq("job", time.Now()), locking.TickGranted).Handle
		} else {
			h = mustLock(t, l, "job", time.Minute)
		}
		if h.Fence() <= highest {
			t.Fatalf("%s: fence %d, not above %d handed out before", how, h.Fence(), highest)
		}
		highest = h.Fence()
		if err := l.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	draw("first", false)
	for _, back := range []int64{1, 1000, highest - 1} {
		for _, tick := range []bool{false, true} {
			if err := admin.Set(ctx, fk, highest-back, 0).Err(); err != nil {
				t.Fatal(err)
			}
			draw("counter set back by "+strconv.FormatInt(back, 10), tick)
		}
	}
}

// TestFenceAcrossPostgresAndBack: switching a key from Redis to Postgres
// and back keeps fences strictly rising: the Redis counter is stale after
// the Postgres period, and the clock floor lifts it past Postgres's fences.
func TestFenceAcrossPostgresAndBack(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	rl := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	pgURL := testenv.PGURL(t)
	ns := testenv.UniqueName(t)
	ctx := context.Background()
	pl, err := pg.Open(ctx, pg.Options{URL: pgURL, Namespace: ns})
	if err != nil {
		t.Fatalf("pg.Open: %v", err)
	}
	t.Cleanup(func() {
		_ = pl.Close(context.Background())
		c, err := pgx.Connect(context.Background(), pgURL)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), `DELETE FROM bext_lock_fences WHERE namespace = $1`, ns); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})

	var highest int64
	var trail []string
	use := func(name string, l locking.Locker, n int) {
		t.Helper()
		for range n {
			h, err := l.TryLock(ctx, "job", time.Minute)
			if err != nil || h == nil {
				t.Fatalf("%s TryLock = %v, %v", name, h, err)
			}
			trail = append(trail, name+" "+strconv.FormatInt(h.Fence(), 10))
			if h.Fence() <= highest {
				t.Fatalf("fences not strictly rising across backends: %s", strings.Join(trail, ", "))
			}
			highest = h.Fence()
			if err := l.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
	}
	use("redis", rl, 3)
	use("postgres", pl, 3)
	use("redis", rl, 3)
	t.Logf("fences: %s", strings.Join(trail, ", "))
}

// TestLuaNumbersRoundTripExactly: marks and fences are microsecond numbers
// above 2^50; Lua prints such numbers as 1.7960416032329e+15, so one that
// went through a string built in Lua would come back rounded.
func TestLuaNumbersRoundTripExactly(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin), Holder: "h"})
	ctx := context.Background()

	// A tick whose every digit matters.
	tick := time.UnixMicro(time.Now().UnixMicro()/1000000*1000000 + 123457)
	if tick.UnixMicro() < 1<<50 {
		t.Fatalf("tick %d µs is not above 2^50: the test proves nothing", tick.UnixMicro())
	}
	ans := mustTick(t, l, tickReq("s", tick), locking.TickGranted)
	if ans.Mark.UnixMicro() != tick.UnixMicro() {
		t.Errorf("answer's mark %d, want %d", ans.Mark.UnixMicro(), tick.UnixMicro())
	}
	if m, _ := getInt(t, admin, l.lockKey("s")+markSuffix); m != tick.UnixMicro() {
		t.Errorf("stored mark %d, want %d", m, tick.UnixMicro())
	}
	if v := storedValue(t, admin, l, "s"); v != l.storedValue(tickTag(ans.Handle.Token(), tick), ans.Handle.Fence()) {
		t.Errorf("stored value %q does not carry the fence %d exactly", v, ans.Handle.Fence())
	}
	if err := l.Release(ctx, ans.Handle); err != nil {
		t.Fatal(err)
	}

	// A counter far above the clock, past 2^52 (where doubles still hold
	// every integer): the next fence is exactly one more, stored and
	// returned exactly, and Renew/Release (which compare the stored value)
	// accept it.
	const big = 1<<52 + 1
	if err := admin.Set(ctx, l.lockKey("s")+fenceSuffix, big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i, get := range []func() *locking.Handle{
		func() *locking.Handle { return mustLock(t, l, "s", time.Minute) },
		func() *locking.Handle {
			return mustTick(t, l, tickReq("s", tick.Add(time.Second)), locking.TickGranted).Handle
		},
	} {
		h := get()
		if want := int64(big + 1 + i); h.Fence() != want {
			t.Errorf("fence after counter %d = %d, want %d", big+i, h.Fence(), want)
		}
		if err := l.Renew(ctx, h); err != nil {
			t.Errorf("Renew: %v", err)
		}
		if err := l.Release(ctx, h); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
}

// TestForgottenMarksNeverRunADecidedTick: after Redis lost every mark
// (FLUSHALL on a private server), a node that passes the tick it saw
// decided as Floor gets done for it, while a node without a floor (one
// that never saw it) would run it again: the floor is what stops it.
func TestForgottenMarksNeverRunADecidedTick(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t) // private: FLUSHALL
	admin := adminClient(t, srv.URL())
	l := openLocker(t, Options{URL: srv.URL(), KeyPrefix: "t:"})
	ctx := context.Background()

	// A generous skew: the tick must stay within it of the server's clock
	// for the whole test, however slow the machine.
	tickReq := func(key string, tick time.Time) locking.TickRequest {
		r := tickReq(key, tick)
		r.MaxSkew = 30 * time.Second
		return r
	}
	t0 := time.Now().Truncate(time.Millisecond)
	for _, k := range []string{"with-floor", "without"} {
		h := mustTick(t, l, tickReq(k, t0), locking.TickGranted).Handle
		if err := l.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A mark set back instead of lost (a lagging replica promoted).
	if err := admin.Set(ctx, l.lockKey("set-back")+markSuffix, t0.Add(-time.Minute).UnixMicro(), 0).Err(); err != nil {
		t.Fatal(err)
	}

	for _, k := range []string{"with-floor", "set-back"} {
		req := tickReq(k, t0)
		req.Floor = t0
		a := mustTick(t, l, req, locking.TickDone)
		if !a.Mark.Equal(t0) {
			t.Errorf("%s: mark after the floor = %v, want raised to %v", k, a.Mark, t0)
		}
		if m, _ := getInt(t, admin, l.lockKey(k)+markSuffix); m != t0.UnixMicro() {
			t.Errorf("%s: stored mark %d, want raised to the floor %d", k, m, t0.UnixMicro())
		}
		// And any other node now gets done too, floor or not.
		mustTick(t, l, tickReq(k, t0), locking.TickDone)
	}
	// What the floor prevents.
	mustTick(t, l, tickReq("without", t0), locking.TickGranted)

	// A floor is never taken past the server's clock: a floor in the
	// future does not make the present tick done.
	req := tickReq("future-floor", time.Now().Add(time.Second))
	req.Floor = time.Now().Add(time.Hour)
	mustTick(t, l, req, locking.TickGranted)
}

// TestInitMarks: a key's first mark is the server's time, so a schedule
// never runs a tick from before it was first loaded; existing marks stay.
func TestInitMarks(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	ctx := context.Background()

	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := admin.Set(ctx, l.lockKey("old")+markSuffix, old.UnixMicro(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{"old"}
	for i := range 1200 { // more than one batch
		keys = append(keys, "new"+strconv.Itoa(i))
	}
	before := time.Now()
	if err := l.InitMarks(ctx, keys); err != nil {
		t.Fatalf("InitMarks: %v", err)
	}
	if m, _ := getInt(t, admin, l.lockKey("old")+markSuffix); m != old.UnixMicro() {
		t.Errorf("existing mark changed to %d, want %d", m, old.UnixMicro())
	}
	for _, k := range []string{"new0", "new1199"} {
		m, ok := getInt(t, admin, l.lockKey(k)+markSuffix)
		if !ok || time.UnixMicro(m).Sub(before).Abs() > time.Minute {
			t.Errorf("mark of %s = %d (present %v), want about %d", k, m, ok, before.UnixMicro())
		}
	}
	// A tick from before the load is done, even inside the catch-up window.
	req := tickReq("new5", before.Add(-time.Second))
	req.Window = time.Hour
	mustTick(t, l, req, locking.TickDone)
	if err := l.InitMarks(ctx, []string{""}); err == nil {
		t.Error("InitMarks with an empty key = nil, want ErrInvalid")
	}
}

// A fence counter of plain locks expires after 30 days without an
// acquisition (keys of one-off `lock run` calls do not stay forever);
// losing it is safe, as the next fence is floored at the clock. A key's
// tick mark never expires, and neither does the counter a tick grant wrote
// (ticks.lua writes it with the marks, in one MSET): it lives as long as
// the mark of its schedule.
func TestFenceCounterExpiresMarkDoesNot(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	ctx := context.Background()
	h := mustLock(t, l, "exp", time.Minute)
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	fk := l.lockKey("exp") + fenceSuffix
	ttl, err := admin.PTTL(ctx, fk).Result()
	if err != nil || ttl < 29*24*time.Hour || ttl > 30*24*time.Hour {
		t.Fatalf("fence counter TTL %v (%v), want about 30 days", ttl, err)
	}
	if err := admin.Del(ctx, fk).Err(); err != nil { // as if it expired
		t.Fatal(err)
	}
	h2 := mustTick(t, l, tickReq("exp", time.Now()), locking.TickGranted).Handle
	if h2.Fence() <= h.Fence() {
		t.Fatalf("fence %d after the counter expired, not above %d", h2.Fence(), h.Fence())
	}
	if err := l.Release(ctx, h2); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{fk, l.lockKey("exp") + ":mark"} {
		if ttl, err := admin.PTTL(ctx, k).Result(); err != nil || ttl != -1 {
			t.Errorf("%s TTL after a tick grant %v (%v), want none (-1)", k, ttl, err)
		}
	}
}

// TestBatchedPerTickGrantsShareTheCounter: per-tick locks of one schedule
// granted in one ticks.lua draw their fences from one counter, which the
// script writes only at its end (flush): the second grant finds the
// counter at the first one's fence (it was drawn this microsecond) and
// INCRs it, which must read the first grant's value, not the stored one.
// Fences strictly increase, and the counter holds the last.
func TestBatchedPerTickGrantsShareTheCounter(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	ctx := context.Background()
	now := time.Now()
	var reqs []locking.TickRequest
	for i := range 3 {
		r := tickReq("pt", now.Add(time.Duration(i-3)*100*time.Millisecond))
		r.PerTick = true
		reqs = append(reqs, r)
	}
	answers, errs := l.TryLockTicks(ctx, reqs)
	var last int64
	for i := range reqs {
		if errs[i] != nil || answers[i].Verdict != locking.TickGranted {
			t.Fatalf("request %d: %v, %v; want granted", i, answers[i].Verdict, errs[i])
		}
		if f := answers[i].Handle.Fence(); f <= last {
			t.Fatalf("request %d: fence %d, not above the one before (%d)", i, f, last)
		}
		last = answers[i].Handle.Fence()
	}
	if c, ok := getInt(t, admin, l.lockKey("pt")+fenceSuffix); !ok || c != last {
		t.Errorf("counter %d (present %v), want the last fence %d", c, ok, last)
	}
	for i := range reqs {
		if err := l.Release(ctx, answers[i].Handle); err != nil {
			t.Fatal(err)
		}
	}
}
