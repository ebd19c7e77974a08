package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// The late reply on a real backend: a node reaches its backend through a
// link that delays every reply past op_timeout (on Redis 200 ms each way,
// op_timeout 300 ms). Its try-lock-tick is decided on the server (the lock taken, the
// mark raised) and its reply comes too late. The link recovers; the tick
// must run on that node, once. Skipped as backend_error, it ran nowhere:
// every other node, and this one's catch-up, is told done.
//
// The scheduler's clock is a fake one set to the real time, so the tick
// it asks for is the backend's present: the next whole second once the
// scheduler started (the schedule's mark, created as it started, is
// later than the ticks before).

// lateReplyRunsOnce runs the scenario on locker, whose link is p, delayed
// by delay each way.
func lateReplyRunsOnce(t *testing.T, p *faultproxy.Proxy, locker scheduler.Locker, delay time.Duration) {
	t.Helper()
	clock := fakeclock.New(time.Now().Truncate(time.Second))
	jb := &countingJob{}
	s := sched("late", everySecond, hints.RequireGlobal, jb)
	s.ExpectedRuntime = 10 * time.Second // a lease that outlives the resends
	h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
		MaxClockSkew: 5 * time.Second, SafetyMargin: 100 * time.Millisecond}, s).start()

	p.Delay(delay)
	tick := time.Now().Truncate(time.Second).Add(time.Second)
	clock.Advance(tick.Sub(clock.Now()))
	const resending, skipped = "try-lock-tick undecided: resending it", "tick skipped"
	h.logs.wait(t, "the late reply's outcome", func() bool {
		return h.logs.count(slog.LevelDebug, resending) > 0 || h.logs.count(slog.LevelDebug, skipped) > 0
	})
	p.Delay(0)
	h.idle()
	_, skips, _ := h.rec.snapshot()
	if got := jb.got(); len(got) != 1 || !got[0].Time.Equal(tick) {
		h.logs.mu.Lock()
		for _, r := range h.logs.recs {
			var attrs []string
			r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a.String()); return true })
			t.Logf("%s %s %v", r.Level, r.Message, attrs)
		}
		h.logs.mu.Unlock()
		t.Fatalf("ran %v (skips %v), want the tick at %v once: granted on the server, its reply late", got, skips, tick)
	}
	if len(skips) != 0 {
		t.Errorf("skips %v, want none", skips)
	}
}

func TestLateReplyGrantRunsOnceRedis(t *testing.T) {
	t.Parallel()
	u := testenv.RedisURL(t)
	opt, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(opt)
	prefix := "bext:test:" + testenv.UniqueName(t) + ":"
	t.Cleanup(func() {
		deleteRedisKeys(t, admin, prefix)
		admin.Close()
	})
	p := faultproxy.Start(t, opt.Addr)
	l, err := redis.Open(redis.Options{URL: fmt.Sprintf("redis://%s/%d", p.Addr(), opt.DB), KeyPrefix: prefix,
		OpTimeout: 300 * time.Millisecond, Holder: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	lateReplyRunsOnce(t, p, l, 200*time.Millisecond)
}

// On Postgres the resend is first told resend_held: the session of the
// first attempt, dropped by the client when its op_timeout passed, still
// holds the lock until the server notices. It is resent until then, within
// the lease: Postgres drops a silent client's session, and its locks,
// within twice op_timeout (MaxLease), so op_timeout is 2 s here (the
// reply comes at 3 s), and the server has about 2 s to notice the first
// session is gone.
func TestLateReplyGrantRunsOncePostgres(t *testing.T) {
	t.Parallel()
	raw := testenv.PGURL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.UniqueName(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, `DELETE FROM bext_lock_fences WHERE namespace = $1`, ns); err != nil {
			t.Logf("cleaning fence rows: %v", err)
		}
		admin.Close(ctx)
	})
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("this test needs BEXT_TEST_PG_URL as a postgres:// URL with a TCP host, got %q", raw)
	}
	p := faultproxy.Start(t, u.Host)
	u.Host = p.Addr()
	l, err := pg.Open(ctx, pg.Options{URL: u.String(), Namespace: ns, OpTimeout: 2 * time.Second, Holder: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	lateReplyRunsOnce(t, p, l, 1500*time.Millisecond)
}
