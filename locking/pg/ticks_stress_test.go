package pg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// TestTryLockTicksChurn: three nodes send batches mixing plain and per-tick
// requests over overlapping keys (the same key several times in a batch, in
// random orders) while InitMarks, SetPause and ReleaseAll write the same rows:
// no statement fails (no deadlock: every writer locks rows in one order),
// each tick of a key is granted at most once, and a key's fences rise with
// its ticks.
func TestTryLockTicksChurn(t *testing.T) {
	c := newCluster(t)
	const nKeys, iters = 24, 25
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	base := c.dbNow().Add(-3 * time.Second).Truncate(time.Millisecond)
	type grant struct {
		tick  int64
		fence int64
	}
	var (
		mu     sync.Mutex
		grants = map[string][]grant{}
		wg     sync.WaitGroup
	)
	ctx := context.Background()
	nodes := []*Locker{c.open(Options{}), c.open(Options{}), c.open(Options{MaxSessions: 2})}
	for n, l := range nodes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			for it := range iters {
				var reqs []locking.TickRequest
				for range 30 {
					r := tickReq(keys[rng.IntN(nKeys)], base.Add(time.Duration(it*10+rng.IntN(25))*time.Millisecond))
					r.PerTick = rng.IntN(2) == 0
					reqs = append(reqs, r)
				}
				answers, errs := l.TryLockTicks(ctx, reqs)
				var hs []*locking.Handle
				mu.Lock()
				for i := range reqs {
					switch {
					case errs[i] != nil:
						t.Errorf("node %d, %s at %v: %v", n, reqs[i].Key, reqs[i].Tick, errs[i])
					case answers[i].Verdict == locking.TickGranted:
						grants[reqs[i].Key] = append(grants[reqs[i].Key], grant{reqs[i].Tick.UnixMicro(), answers[i].Handle.Fence()})
						hs = append(hs, answers[i].Handle)
					}
				}
				mu.Unlock()
				for i, err := range l.ReleaseAll(ctx, hs) {
					if err != nil {
						t.Errorf("node %d: release %s: %v", n, hs[i].Key(), err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(99, 7))
		for range iters {
			ks := slices.Clone(keys)
			rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
			if err := nodes[0].InitMarks(ctx, ks[:nKeys/2]); err != nil {
				t.Errorf("InitMarks: %v", err)
			}
			if err := nodes[1].SetPause(ctx, keys[rng.IntN(nKeys)], locking.Pause{Paused: rng.IntN(2) == 0}); err != nil {
				t.Errorf("SetPause: %v", err)
			}
		}
	})
	wg.Wait()
	total := 0
	for k, gs := range grants {
		slices.SortFunc(gs, func(a, b grant) int { return int(a.tick - b.tick) })
		total += len(gs)
		for i := 1; i < len(gs); i++ {
			if gs[i].tick == gs[i-1].tick {
				t.Errorf("%s: tick %d granted twice (fences %d, %d)", k, gs[i].tick, gs[i-1].fence, gs[i].fence)
			} else if gs[i].fence <= gs[i-1].fence {
				t.Errorf("%s: tick %d has fence %d, not above tick %d's %d", k, gs[i].tick, gs[i].fence, gs[i-1].tick, gs[i-1].fence)
			}
		}
	}
	t.Logf("%d grants", total)
	if total == 0 {
		t.Error("nothing granted: the test tests nothing")
	}
}

// swallowConn drops every write once one carries marker (and so every
// write after it): the server never hears the statement and never answers,
// as behind a network that stalls mid-session.
type swallowConn struct {
	net.Conn
	marker  []byte
	stalled atomic.Bool
}

func (c *swallowConn) Write(b []byte) (int, error) {
	if c.stalled.Load() || bytes.Contains(b, c.marker) {
		c.stalled.Store(true)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// TestInitMarksWarmIsBounded: InitMarks, called without a deadline (the
// scheduler passes its run context), returns within about OpTimeout even
// when the server stops answering the statements warm sends, as every other
// statement of the Locker does: warm is bounded by OpTimeout.
func TestInitMarksWarmIsBounded(t *testing.T) {
	t.Run("no deadline", func(t *testing.T) { testInitMarksWarmIsBounded(t, context.Background(), time.Second) })
	// The scheduler calls InitMarks with a deadline (startTimeout, 2 s)
	// below the default OpTimeout: warm keeps to it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	t.Run("caller's deadline first", func(t *testing.T) { testInitMarksWarmIsBounded(t, ctx, 20*time.Second) })
}

func testInitMarksWarmIsBounded(t *testing.T, ctx context.Context, opTimeout time.Duration) {
	c := newCluster(t)
	l := c.open(Options{OpTimeout: opTimeout})
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, conn)
		return &swallowConn{Conn: conn, marker: []byte("SET fence = t.fence WHERE false")}, nil
	}
	// pgx drains a timed-out connection for up to 15 s (asyncClose) and
	// this one never answers: end them with the test.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range conns {
			_ = nc.Close()
		}
	})
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- l.InitMarks(ctx, []string{"a", "b"}) }()
	bound := opTimeout
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("InitMarks: %v", err)
		}
		t.Logf("InitMarks returned after %v", time.Since(start))
		if took := time.Since(start); took > bound+2*time.Second {
			t.Errorf("InitMarks took %v, want about %v (the caller's deadline or OpTimeout, whichever comes first)", took, bound)
		}
	case <-time.After(bound + 8*time.Second):
		t.Errorf("InitMarks still running after %v (OpTimeout %v, caller's deadline in %v): warm waits for a server that does not answer past both", time.Since(start), opTimeout, bound)
		mu.Lock()
		for _, nc := range conns {
			_ = nc.Close()
		}
		mu.Unlock()
		<-done // the statement fails on its closed connection
	}
}

// TestInitMarksWarmDoesNotWaitForBusySessions: when every session the
// Locker may open is open and one is busy with another statement, warm
// readies the idle ones and stops: it does not wait for a busy slot (its
// own, held for the session it readies, or another call's), which held
// InitMarks, and the slots warm holds, for OpTimeout.
func TestInitMarksWarmDoesNotWaitForBusySessions(t *testing.T) {
	for _, busy := range []int{0, 1} {
		t.Run(fmt.Sprint("busy session ", busy), func(t *testing.T) {
			c := newCluster(t)
			const opTimeout = 3 * time.Second
			l := c.open(Options{OpTimeout: opTimeout, MaxSessions: 2})
			ctx := context.Background()
			s1, _, err := l.acquireReady(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s2, _, err := l.acquireReady(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held, idle := s1, s2
			if busy == 1 {
				held, idle = s2, s1
			}
			l.release(idle)
			start := time.Now()
			err = l.InitMarks(ctx, []string{"a"})
			took := time.Since(start)
			l.release(held)
			if err != nil {
				t.Fatal(err)
			}
			if took > opTimeout/2 {
				t.Errorf("InitMarks took %v (OpTimeout %v) with one of two sessions busy: warm waited for a busy session", took, opTimeout)
			}
		})
	}
}

// TestPgBouncerTickBatchReadsAsPooler: TestPgBouncerStatementCacheReadsAsPooler
// for the two-statement tick batch: through a transaction pool whose test
// was passed (verdict preset), a second client's try-lock-tick is refused
// as a pooler, not an outage, and no tick is granted twice.
func TestPgBouncerTickBatchReadsAsPooler(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "transaction", 1)
	a := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	b := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	a.pooler.set(nil)
	b.pooler.set(nil)
	ctx := context.Background()
	tick := c.dbNow().Truncate(time.Second)
	ansA, errA := a.TryLockTick(ctx, tickReq("sched", tick))
	ansB, errB := b.TryLockTick(ctx, tickReq("sched", tick))
	t.Logf("a: %v %v; b: %v %v", ansA.Verdict, errA, ansB.Verdict, errB)
	if ansA.Verdict == locking.TickGranted && ansB.Verdict == locking.TickGranted {
		t.Fatal("one tick granted to both clients")
	}
	for _, err := range []error{errA, errB} {
		if err != nil && (!errors.Is(err, ErrTransactionPooler) || errors.Is(err, locking.ErrUnavailable)) {
			t.Errorf("try-lock-tick through a transaction pool = %v; want ErrTransactionPooler", err)
		}
	}
	if errB == nil && ansB.Verdict != locking.TickDone {
		t.Errorf("second client: %v, want done or ErrTransactionPooler", ansB.Verdict)
	}
}

// TestTryLockTicksBatchedEqualsSequential: random batches over a few keys,
// mixing plain and per-tick requests (one key several times, plain and
// per-tick, ticks rising and falling, paused keys, keys with and without
// rows) are decided exactly as the same requests one TryLockTick after the
// other, on a twin namespace: the same verdicts and the same marks. Lock ids
// are distinct within a batch (two requests with one lock id are
// documented to differ: the second is contended).
// Not parallel: each trial's ticks stay within the skew of the server's
// clock for about 2s only (see base below), and the cases running beside
// it on a 2-core machine stretched a trial past that.
func TestTryLockTicksBatchedEqualsSequential(t *testing.T) {
	clock := newCluster(t)
	rng := rand.New(rand.NewPCG(3, 3))
	keys := []string{"a", "b", "c"}
	for trial := range 12 {
		// Per trial: a missing mark counts as the server's now - skew (5s),
		// which must stay below every tick (base..base+500ms) through both
		// runs. One base for all trials was overtaken by the clock after
		// a few seconds, on a loaded machine between the batched run and
		// the sequential one (a tick done in one and granted in the other).
		base := clock.dbNow().Add(-3 * time.Second).Truncate(time.Millisecond)
		var reqs []locking.TickRequest
		ids := map[string]bool{}
		for len(reqs) < 7 {
			r := tickReq(keys[rng.IntN(len(keys))], base.Add(time.Duration(rng.IntN(6))*100*time.Millisecond))
			r.PerTick = rng.IntN(3) > 0
			id := r.Key
			if r.PerTick {
				id = locking.TickLockKey(r.Key, r.Tick)
			}
			if ids[id] {
				continue
			}
			ids[id] = true
			reqs = append(reqs, r)
		}
		paused := keys[rng.IntN(len(keys))]
		marked := keys[rng.IntN(len(keys))]
		setup := func(c *cluster, l *Locker) {
			if rng.IntN(2) == 0 {
				if err := l.SetPause(context.Background(), paused, locking.Pause{Paused: true}); err != nil {
					t.Fatal(err)
				}
			}
			c.exec(`INSERT INTO bext_lock_fences (namespace, key, fence, tick_mark) VALUES ($1, $2, 0, $3)
				ON CONFLICT (namespace, key) DO UPDATE SET tick_mark = excluded.tick_mark`, c.ns, marked, base.Add(200*time.Millisecond).UnixMicro())
		}
		describe := func(c *cluster, answers []locking.TickAnswer, errs []error) string {
			var out []string
			for i := range answers {
				out = append(out, fmt.Sprintf("%s/%v@%d: %v %v", reqs[i].Key, reqs[i].PerTick, reqs[i].Tick.Sub(base).Milliseconds(), answers[i].Verdict, errs[i]))
			}
			for _, k := range keys {
				m, ok := c.mark(k)
				ms := fmt.Sprint(m.Sub(base).Milliseconds())
				if ok && !m.Equal(base.Add(200*time.Millisecond)) && !slices.ContainsFunc(reqs, func(r locking.TickRequest) bool { return r.Tick.Equal(m) }) {
					// Neither a tick asked nor the one set up: a missing mark
					// stored at the server's now - skew, which moves between
					// the two runs (3009 against 3013 in a failed run).
					ms = "now-skew"
				}
				out = append(out, fmt.Sprintf("mark %s %v %v", k, ok, ms))
			}
			return fmt.Sprint(out)
		}
		state := rng.Uint64()
		batched := newCluster(t)
		bl := batched.open(Options{})
		rng = rand.New(rand.NewPCG(state, 1))
		setup(batched, bl)
		answers, errs := bl.TryLockTicks(context.Background(), reqs)
		got := describe(batched, answers, errs)

		alone := newCluster(t)
		al := alone.open(Options{})
		rng = rand.New(rand.NewPCG(state, 1))
		setup(alone, al)
		answers, errs = nil, nil
		for _, r := range reqs {
			a, err := al.TryLockTick(context.Background(), r)
			answers, errs = append(answers, a), append(errs, err)
		}
		want := describe(alone, answers, errs)
		if trial < 2 {
			t.Logf("trial %d: %s", trial, got)
		}
		if got != want {
			t.Errorf("trial %d:\nbatched %v\nalone   %v", trial, got, want)
		}
		rng = rand.New(rand.NewPCG(state, 2))
	}
}

// TestTryLockTicksRowDeletedWhileWaiting: an operator deletes a schedule's
// row (its mark and pause) while a batch waits for it: the batch creates
// the row afresh and decides on it, without an error; a key paused by a
// transaction that commits while the batch waits is paused.
func TestTryLockTicksRowDeletedWhileWaiting(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	if err := l.InitMarks(ctx, []string{"gone", "paused"}); err != nil {
		t.Fatal(err)
	}
	now := c.dbNow() // after the marks InitMarks set
	tx, err := c.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM bext_lock_fences WHERE namespace = $1 AND key = 'gone'`, c.ns); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE bext_lock_fences SET paused = true WHERE namespace = $1 AND key = 'paused'`, c.ns); err != nil {
		t.Fatal(err)
	}
	type result struct {
		answers []locking.TickAnswer
		errs    []error
	}
	done := make(chan result, 1)
	go func() {
		a, e := l.TryLockTicks(ctx, []locking.TickRequest{tickReq("paused", now), tickReq("gone", now)})
		done <- result{a, e}
	}()
	c.waitBlocked()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	want := []locking.TickVerdict{locking.TickPaused, locking.TickGranted}
	for i := range want {
		if r.errs[i] != nil || r.answers[i].Verdict != want[i] {
			t.Errorf("request %d: %v, %v; want %v", i, r.answers[i].Verdict, r.errs[i], want[i])
		}
	}
	if m, ok := c.mark("gone"); !ok || !m.Equal(now) {
		t.Errorf("mark of the re-created row: %v %v, want %v", m, ok, now)
	}
}

// TestTryLockTicksChaos: three nodes, two of them behind links that are cut
// at random moments (mid-batch, mid-commit, mid-reply), batch mixed
// requests over shared keys and resend the failed ones with their tokens,
// as the scheduler does. A tick is granted to one request (token) at most,
// a key's fences rise with its ticks, and no batch deadlocks.
func TestTryLockTicksChaos(t *testing.T) {
	c := newCluster(t)
	const nKeys, iters = 10, 20
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	base := c.dbNow().Add(-3 * time.Second).Truncate(time.Millisecond)
	type grant struct {
		tick  int64
		fence int64
		token string
	}
	var (
		mu     sync.Mutex
		grants = map[string][]grant{}
		nerr   int
		wg     sync.WaitGroup
	)
	ctx := context.Background()
	var proxies []*faultproxy.Proxy
	nodes := []*Locker{c.open(Options{})}
	for range 2 {
		p, u := c.proxied()
		proxies = append(proxies, p)
		nodes = append(nodes, c.open(Options{URL: u, OpTimeout: time.Second}))
	}
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		rng := rand.New(rand.NewPCG(5, 5))
		for {
			select {
			case <-stop:
				for _, p := range proxies {
					p.Heal()
				}
				return
			case <-time.After(time.Duration(10+rng.IntN(40)) * time.Millisecond):
			}
			p := proxies[rng.IntN(len(proxies))]
			p.Cut()
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
			p.Heal()
		}
	})
	for n, l := range nodes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(n), 11))
			for it := range iters {
				var reqs []locking.TickRequest
				for j := range 15 {
					r := tickReq(keys[rng.IntN(nKeys)], base.Add(time.Duration(it*10+rng.IntN(20))*time.Millisecond))
					r.PerTick = rng.IntN(2) == 0
					r.Token = fmt.Sprintf("n%d-i%d-r%d", n, it, j)
					reqs = append(reqs, r)
				}
				var hs []*locking.Handle
				for try := 0; len(reqs) > 0 && try < 10; try++ {
					if try > 0 {
						time.Sleep(10 * time.Millisecond) // let the link heal
					}
					answers, errs := l.TryLockTicks(ctx, reqs)
					var again []locking.TickRequest
					mu.Lock()
					for i := range reqs {
						switch {
						case errs[i] != nil:
							nerr++
							if nerr%100 == 1 {
								t.Logf("node %d: %v", n, errs[i])
							}
							if strings.Contains(errs[i].Error(), "deadlock") {
								t.Errorf("node %d: %v", n, errs[i])
							}
							again = append(again, reqs[i])
						case answers[i].Verdict == locking.TickGranted:
							grants[reqs[i].Key] = append(grants[reqs[i].Key], grant{reqs[i].Tick.UnixMicro(), answers[i].Handle.Fence(), reqs[i].Token})
							hs = append(hs, answers[i].Handle)
						}
					}
					mu.Unlock()
					reqs = again
				}
				l.ReleaseAll(ctx, hs) // a lock lost with its session is fine here
			}
		})
	}
	wg.Wait()
	close(stop)
	chaos.Wait()
	total := 0
	for k, gs := range grants {
		slices.SortFunc(gs, func(a, b grant) int { return int(a.tick - b.tick) })
		for i := range gs {
			total++
			if i == 0 {
				continue
			}
			p, g := gs[i-1], gs[i]
			switch {
			case g.tick == p.tick && g.token != p.token:
				t.Errorf("%s: tick %d granted to two requests, %s (fence %d) and %s (fence %d)", k, g.tick, p.token, p.fence, g.token, g.fence)
			case g.tick == p.tick && g.fence != p.fence:
				t.Errorf("%s: tick %d granted twice to %s, fences %d and %d", k, g.tick, g.token, p.fence, g.fence)
			case g.tick != p.tick && g.fence <= p.fence:
				t.Errorf("%s: tick %d has fence %d, not above tick %d's %d", k, g.tick, g.fence, p.tick, p.fence)
			}
		}
	}
	t.Logf("%d grants, %d errors", total, nerr)
}

// TestInitMarksDuplicateKeys: InitMarks with a key named twice (the
// scheduler's recovery probe sends its unmarked schedules and its owed ones,
// and a new schedule can be both, or be filed twice by two reloads) creates
// the mark once. Postgres refuses an upsert that meets one row twice, so the
// keys must be made distinct first: otherwise the probe fails forever and
// the scheduler never sees the backend back.
func TestInitMarksDuplicateKeys(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	if err := l.InitMarks(context.Background(), []string{"new", "old", "new"}); err != nil {
		t.Fatalf("InitMarks with a key twice: %v", err)
	}
	for _, k := range []string{"new", "old"} {
		if _, ok := c.mark(k); !ok {
			t.Errorf("no mark for %s", k)
		}
	}
}

// TestInitMarksThroughSmallSessionPool: behind a session-pooling PgBouncer
// with fewer server connections than warm opens, warm's extra session waits
// in PgBouncer's queue until warm's deadline; the sessions that did get a
// server connection stay open and ready, not killed with it. (InitMarks
// still waits for that deadline: see the review report.)
//
// Not parallel: beside the other cases on the 2-core machine, warm found
// one session ready where it readies two alone (seen once in CI); alone it
// passes, and what it checks is warm's bookkeeping, not a race.
func TestInitMarksThroughSmallSessionPool(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "session", 2)
	const opTimeout = 10 * time.Second
	l := c.open(Options{URL: bouncer.URL(), OpTimeout: opTimeout})
	start := time.Now()
	err := l.InitMarks(context.Background(), []string{"a"})
	took := time.Since(start)
	n := l.openSessions()
	t.Logf("InitMarks: %v after %v, %d sessions open", err, took, n)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("%d sessions open after InitMarks behind a pool of 2 server connections, want 2: warm killed the sessions it had readied when a later one timed out", n)
	}
	// The third session waits in PgBouncer's queue: warm gives up on it
	// after warmConnect, not at OpTimeout, so a scheduler's start is not
	// held for long.
	if took >= opTimeout/2 {
		t.Errorf("InitMarks took %v behind a full session pool: warm waited for OpTimeout (%v), not warmConnect (%v)", took, opTimeout, warmConnect)
	}
	mustTick(t, l, tickReq("a", c.dbNow()), locking.TickGranted, "a tick after InitMarks")
}
