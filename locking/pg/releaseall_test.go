package pg

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/locking"
)

// onNewSession takes the locks of keys (plain locks) and of ticks (tick
// grants at tick) on a session of l opened for them: every open session's
// slot is held meanwhile, so l opens a new one (MaxSessions must allow
// it). It returns the handles, keys first, and the session.
func onNewSession(t *testing.T, l *Locker, tick time.Time, keys, ticks []string) ([]*locking.Handle, *session) {
	t.Helper()
	ctx := context.Background()
	l.mu.Lock()
	busy := append([]*session(nil), l.sessions...)
	l.mu.Unlock()
	for _, s := range busy {
		if err := l.use(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	var hs []*locking.Handle
	for _, k := range keys {
		hs = append(hs, mustLock(t, l, k))
	}
	for _, k := range ticks {
		hs = append(hs, mustTick(t, l, tickReq(k, tick), locking.TickGranted, k).Handle)
	}
	for _, s := range busy {
		l.release(s)
	}
	s := h2lease(t, l, hs[0]).sess
	for _, h := range hs {
		if h2lease(t, l, h).sess != s {
			t.Fatalf("%v taken on another session than %v", h, hs[0])
		}
	}
	for _, o := range busy {
		if o == s {
			t.Fatalf("%v taken on an existing session", hs[0])
		}
	}
	return hs, s
}

// unlockBehind gives key's lock back on its session behind l's back, as
// someone running pg_advisory_unlock on the connection would.
func unlockBehind(t *testing.T, l *Locker, h *locking.Handle) {
	t.Helper()
	ls := h2lease(t, l, h)
	ctx := context.Background()
	if err := l.use(ctx, ls.sess); err != nil {
		t.Fatal(err)
	}
	defer l.release(ls.sess)
	var ok bool
	if err := ls.sess.conn.QueryRow(ctx, releaseSQL, ls.id).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlocking %v behind the Locker's back: %v, %v", h, ok, err)
	}
}

// answerOf is what a release's error says, for comparing ReleaseAll with
// Release: the sentinels it wraps and its text with numbers (pids)
// masked. whole false leaves the text out (a round trip's error reads
// differently from the next Release's "session ended").
func answerOf(err error, whole bool) string {
	if err == nil {
		return "nil"
	}
	s := ""
	for _, e := range []error{locking.ErrLockLost, locking.ErrUnavailable, locking.ErrInvalid, locking.ErrClosed, context.Canceled} {
		if errors.Is(err, e) {
			s += "[" + e.Error() + "]"
		}
	}
	if whole {
		s += " " + regexp.MustCompile(`[0-9]+`).ReplaceAllString(err.Error(), "#")
	}
	return s
}

// releaseCase builds one scenario on a fresh namespace and returns the
// Locker and the handles to release; run twice, once released through
// Release and once through ReleaseAll, the answers must agree.
type releaseCase func(t *testing.T, c *cluster) (*Locker, []*locking.Handle)

// compareWithRelease runs build twice and checks that ReleaseAll answers
// each handle as Release, called on each in turn, answers it.
func compareWithRelease(t *testing.T, whole []bool, build releaseCase) (batched []error) {
	t.Helper()
	ctx := context.Background()
	l1, hs1 := build(t, newCluster(t))
	single := make([]error, len(hs1))
	for i, h := range hs1 {
		single[i] = l1.Release(ctx, h)
	}
	l2, hs2 := build(t, newCluster(t))
	batched = l2.ReleaseAll(ctx, hs2)
	if len(batched) != len(hs2) {
		t.Fatalf("ReleaseAll answered %d of %d handles", len(batched), len(hs2))
	}
	for i := range hs2 {
		if a, b := answerOf(batched[i], whole[i]), answerOf(single[i], whole[i]); a != b {
			t.Errorf("handle %d: ReleaseAll answered %q (%v), Release %q (%v)", i, a, batched[i], b, single[i])
		}
	}
	return batched
}

// TestReleaseAll: one ReleaseAll over locks on two sessions, plain and
// tick grants, answers each handle as Release would: its own locks given
// back (tick grants' tokens forgotten, so a late resend is answered done);
// a lock its session no longer holds, and one taken meanwhile by another
// node, reported lost and left to their holders; a handle of another
// Locker and a nil handle refused; a handle already released, and one
// named twice, released once. The bookkeeping forgets every released lock.
func TestReleaseAll(t *testing.T) {
	ctx := context.Background()
	type scene struct {
		c     *cluster
		a, b  *Locker
		thief *locking.Handle
		tick  time.Time
	}
	var scenes []scene
	build := func(t *testing.T, c *cluster) (*Locker, []*locking.Handle) {
		a, b := c.open(Options{MaxSessions: 4}), c.open(Options{})
		tick := c.dbNow().Truncate(time.Second)
		one, _ := onNewSession(t, a, tick, []string{"own1", "gone", "stolen", "done"}, []string{"tick1"})
		two, _ := onNewSession(t, a, tick, []string{"own2"}, []string{"tick2"})
		own1, gone, stolen, done, tick1 := one[0], one[1], one[2], one[3], one[4]
		own2, tick2 := two[0], two[1]
		unlockBehind(t, a, gone)
		unlockBehind(t, a, stolen)
		thief := mustLock(t, b, "stolen")
		if err := a.Release(ctx, done); err != nil {
			t.Fatal(err)
		}
		foreign := mustLock(t, b, "foreign")
		scenes = append(scenes, scene{c: c, a: a, b: b, thief: thief, tick: tick})
		return a, []*locking.Handle{own1, tick1, gone, stolen, foreign, own2, done, nil, tick2, own1, tick1}
	}
	whole := make([]bool, 11)
	for i := range whole {
		whole[i] = true
	}
	errs := compareWithRelease(t, whole, build)
	want := []error{nil, nil, locking.ErrLockLost, locking.ErrLockLost, locking.ErrInvalid, nil,
		locking.ErrLockLost, locking.ErrInvalid, nil, locking.ErrLockLost, locking.ErrLockLost}
	for i, w := range want {
		if (w == nil) != (errs[i] == nil) || (w != nil && !errors.Is(errs[i], w)) {
			t.Errorf("handle %d: %v, want %v", i, errs[i], w)
		}
	}
	for _, sc := range scenes {
		c, a, b := sc.c, sc.a, sc.b
		for _, k := range []string{"own1", "gone", "done", "tick1", "own2", "tick2"} {
			if pid := c.holderPID(k); pid != 0 {
				t.Errorf("%s still held by backend %d", k, pid)
			}
		}
		if c.holderPID("stolen") == 0 {
			t.Error("the thief's lock was given back")
		}
		if err := b.Release(ctx, sc.thief); err != nil {
			t.Errorf("the thief's Release: %v", err)
		}
		a.mu.Lock()
		held := len(a.held)
		leases := 0
		for _, s := range a.sessions {
			leases += len(s.leases)
		}
		a.mu.Unlock()
		if held != 0 || leases != 0 {
			t.Errorf("after ReleaseAll: %d locks held, %d on sessions; want none", held, leases)
		}
		var tokens int
		if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM bext_lock_fences WHERE namespace = $1 AND tick_token IS NOT NULL`, c.ns).Scan(&tokens); err != nil {
			t.Fatal(err)
		}
		if tokens != 0 {
			t.Errorf("%d tick grants' tokens kept after their release", tokens)
		}
		// The released keys can be taken again; the tick is done.
		for _, k := range []string{"own1", "gone", "own2"} {
			if err := b.Release(ctx, mustLock(t, b, k)); err != nil {
				t.Fatal(err)
			}
		}
		mustTick(t, b, tickReq("tick1", sc.tick), locking.TickDone, "tick1 again")
	}
}

// TestReleaseAllRefusesWithoutAsking: a cancelled context and a closed
// Locker are answered for each handle as Release answers them, without a
// round trip: the locks stay held until asked again, or until Close.
func TestReleaseAllRefusesWithoutAsking(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 4})
	var writes atomic.Int64
	l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return countingConn{Conn: conn, writes: &writes}, nil
	}
	tick := c.dbNow().Truncate(time.Second)
	one, _ := onNewSession(t, l, tick, []string{"a"}, []string{"t"})
	two, _ := onNewSession(t, l, tick, []string{"b"}, nil)
	hs := append(one, two...)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	writes.Store(0)
	for i, err := range l.ReleaseAll(cancelled, hs) {
		single := l.Release(cancelled, hs[i])
		if !errors.Is(err, context.Canceled) || answerOf(err, true) != answerOf(single, true) {
			t.Errorf("handle %d under a cancelled context: %v; Release says %v", i, err, single)
		}
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("ReleaseAll under a cancelled context sent %d requests, want none", n)
	}
	for _, k := range []string{"a", "t", "b"} {
		if c.holderPID(k) == 0 {
			t.Errorf("%s given back under a cancelled context", k)
		}
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, err := range l.ReleaseAll(context.Background(), hs) {
		if !errors.Is(err, locking.ErrClosed) {
			t.Errorf("handle %d after Close: %v, want ErrClosed", i, err)
		}
	}
}

// TestReleaseAllOneRoundTripPerSession: on warm sessions, ReleaseAll of
// plain and tick locks spread over two sessions sends one request per
// session, and gives back every lock.
func TestReleaseAllOneRoundTripPerSession(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 4})
	var writes atomic.Int64
	l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return countingConn{Conn: conn, writes: &writes}, nil
	}
	ctx := context.Background()
	tick := c.dbNow().Truncate(time.Second)
	var hs []*locking.Handle
	for g := range 2 {
		got, _ := onNewSession(t, l, tick, []string{fmt.Sprintf("warm%d", g), fmt.Sprintf("p%d-1", g), fmt.Sprintf("p%d-2", g)},
			[]string{fmt.Sprintf("warmtick%d", g), fmt.Sprintf("t%d-1", g), fmt.Sprintf("t%d-2", g)})
		hs = append(hs, got...)
	}
	// Warm both sessions: each prepares the two release statements.
	warm := []*locking.Handle{hs[0], hs[3], hs[6], hs[9]}
	for i, err := range l.ReleaseAll(ctx, warm) {
		if err != nil {
			t.Fatalf("warm-up release %d: %v", i, err)
		}
	}
	rest := []*locking.Handle{hs[1], hs[2], hs[4], hs[5], hs[7], hs[8], hs[10], hs[11]}
	writes.Store(0)
	for i, err := range l.ReleaseAll(ctx, rest) {
		if err != nil {
			t.Errorf("release %d: %v", i, err)
		}
	}
	if n := writes.Load(); n != 2 {
		t.Errorf("ReleaseAll of %d locks on 2 sessions sent %d requests, want 2", len(rest), n)
	}
	for _, h := range rest {
		if pid := c.holderPID(h.Key()); pid != 0 {
			t.Errorf("%s still held by backend %d", h.Key(), pid)
		}
	}
	if list, err := l.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List after ReleaseAll = %v, %v; want nothing held", list, err)
	}
}

// TestReleaseAllSessionDiesMidBatch: a session whose backend is ended
// (pg_terminate_backend) while ReleaseAll waits for it, after the batch of
// another session went through: that one's locks are given back, and
// every lock on the dead session is reported lost, unavailable too, as
// Release reports a lock whose session broke; the dead session is
// forgotten with its locks, which another node can take at once. A
// session already known dead (a Renew found it) answers lost without a
// round trip.
func TestReleaseAllSessionDiesMidBatch(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 4})
	b := c.open(Options{})
	ctx := context.Background()
	tick := c.dbNow().Truncate(time.Second)
	live, _ := onNewSession(t, l, tick, []string{"l1", "l2"}, []string{"lt"})
	doomed, ds := onNewSession(t, l, tick, []string{"d1", "d2"}, []string{"dt"})
	known, ks := onNewSession(t, l, tick, []string{"k1", "k2"}, nil)
	// The known-dead session: ended, and found so by a Renew.
	c.kill("k1")
	if err := l.Renew(ctx, known[0]); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Renew on a terminated session: %v, want ErrLockLost", err)
	}
	// Hold the doomed session's slot, so ReleaseAll's batch for it waits
	// (given back on failure too: Close waits for it).
	if err := l.use(ctx, ds); err != nil {
		t.Fatal(err)
	}
	holding := true
	defer func() {
		if holding {
			l.release(ds)
		}
	}()
	hs := append(append(append([]*locking.Handle(nil), doomed...), live...), known...)
	done := make(chan []error)
	go func() { done <- l.ReleaseAll(ctx, hs) }()
	// Nothing tells that ReleaseAll waits for the slot: poll for it (the
	// test's hold and ReleaseAll's wait make two), and for the live
	// session's locks given back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		waiting := ds.busy == 2
		l.mu.Unlock()
		if waiting && c.holderPID("l1") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ReleaseAll never reached the doomed session")
		}
		time.Sleep(time.Millisecond)
	}
	c.kill("d1")
	holding = false
	l.release(ds)
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("ReleaseAll did not return")
	}
	for i, err := range errs {
		switch h := hs[i]; {
		case i < 3:
			if !errors.Is(err, locking.ErrLockLost) || !errors.Is(err, locking.ErrUnavailable) {
				t.Errorf("%s on the session ended mid-batch: %v, want ErrLockLost and ErrUnavailable", h.Key(), err)
			}
		case i < 6:
			if err != nil {
				t.Errorf("%s on the live session: %v", h.Key(), err)
			}
		case i == 6:
			if !errors.Is(err, locking.ErrLockLost) {
				t.Errorf("%s, found lost by Renew: %v, want ErrLockLost", h.Key(), err)
			}
		default:
			if !errors.Is(err, locking.ErrLockLost) || !errors.Is(err, locking.ErrUnavailable) {
				t.Errorf("%s on the session known dead: %v, want ErrLockLost and ErrUnavailable", h.Key(), err)
			}
		}
	}
	l.mu.Lock()
	for _, s := range l.sessions {
		if s == ds || s == ks {
			t.Errorf("dead session %d still in use", s.pid)
		}
	}
	held := len(l.held)
	l.mu.Unlock()
	if held != 0 {
		t.Errorf("%d locks still held after ReleaseAll", held)
	}
	for _, k := range []string{"d1", "d2", "l1", "l2", "k1", "k2"} {
		if err := b.Release(ctx, mustLock(t, b, k)); err != nil {
			t.Fatal(err)
		}
	}
	// l recovers by itself on a new session.
	if err := l.Release(ctx, mustLock(t, l, "d1")); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseAllDeadSessionAsRelease: with a session ended behind the
// Locker's back, ReleaseAll answers each handle as Release on each in
// turn does: the dead session's locks lost (and the backend unavailable),
// the live session's given back.
func TestReleaseAllDeadSessionAsRelease(t *testing.T) {
	whole := []bool{false, false, false, true, true}
	compareWithRelease(t, whole, func(t *testing.T, c *cluster) (*Locker, []*locking.Handle) {
		l := c.open(Options{MaxSessions: 4})
		tick := c.dbNow().Truncate(time.Second)
		dead, _ := onNewSession(t, l, tick, []string{"d1", "d2"}, []string{"dt"})
		live, _ := onNewSession(t, l, tick, []string{"l1"}, []string{"lt"})
		c.kill("d1")
		return l, append(dead, live...)
	})
}

// TestReleaseAllRace: ReleaseAll calls over overlapping handles in
// different orders, with Renew and Release of the same handles, and
// TryLock of the same keys by another node, all at once: no deadlock, each
// lock released exactly once (one nil answer among all its releases, the
// others lost), every lock given back and the bookkeeping empty.
func TestReleaseAllRace(t *testing.T) {
	const n, callers = 120, 6
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 4})
	other := c.open(Options{})
	ctx := context.Background()
	tick := c.dbNow().Truncate(time.Second)
	hs := make([]*locking.Handle, n)
	forEach(n, func(i int) {
		k := fmt.Sprintf("k%03d", i)
		if i%2 == 0 {
			h, err := l.TryLock(ctx, k, time.Minute)
			if err != nil || h == nil {
				t.Errorf("TryLock(%s) = %v, %v", k, h, err)
			}
			hs[i] = h
			return
		}
		ans, err := l.TryLockTick(ctx, tickReq(k, tick))
		if err != nil || ans.Verdict != locking.TickGranted {
			t.Errorf("TryLockTick(%s) = %v, %v", k, ans.Verdict, err)
		}
		hs[i] = ans.Handle
	})
	if t.Failed() {
		t.FailNow()
	}
	if sessions := len(l.sessionPIDs()); sessions < 2 {
		t.Logf("the locks landed on %d session(s) only", sessions)
	}
	var released [n]atomic.Int64
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			perm := rng.Perm(n)
			batch := make([]*locking.Handle, 0, n)
			for _, i := range perm[:n*2/3] {
				batch = append(batch, hs[i])
			}
			for j, err := range l.ReleaseAll(ctx, batch) {
				i := perm[j]
				switch {
				case err == nil:
					released[i].Add(1)
				case !errors.Is(err, locking.ErrLockLost):
					t.Errorf("ReleaseAll of %s: %v, want nil or ErrLockLost", hs[i].Key(), err)
				}
			}
		})
	}
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < n; i += 7 {
				if err := l.Renew(ctx, hs[i]); err != nil && !errors.Is(err, locking.ErrLockLost) {
					t.Errorf("Renew of %s: %v", hs[i].Key(), err)
				}
				if err := l.Release(ctx, hs[i]); err == nil {
					released[i].Add(1)
				} else if !errors.Is(err, locking.ErrLockLost) {
					t.Errorf("Release of %s: %v", hs[i].Key(), err)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range n {
			if h, err := other.TryLock(ctx, fmt.Sprintf("k%03d", i), time.Minute); err != nil {
				t.Errorf("the other node's TryLock: %v", err)
			} else if h != nil {
				if err := other.Release(ctx, h); err != nil {
					t.Errorf("the other node's Release: %v", err)
				}
			}
		}
	})
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		// Not t.Fatal: Close would wait for the stuck calls' locks.
		panic("ReleaseAll, Renew and Release deadlocked")
	}
	// Handles no call named are released here, once.
	for i, err := range l.ReleaseAll(ctx, hs[:]) {
		if err == nil {
			released[i].Add(1)
		}
	}
	for i := range n {
		if got := released[i].Load(); got != 1 {
			t.Errorf("%s released %d times, want once", hs[i].Key(), got)
		}
	}
	l.mu.Lock()
	held := len(l.held)
	leases := 0
	for _, s := range l.sessions {
		leases += len(s.leases)
	}
	l.mu.Unlock()
	if held != 0 || leases != 0 {
		t.Errorf("after every release: %d locks held, %d on sessions; want none", held, leases)
	}
	if list, err := l.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List after every release = %d locks, %v; want none", len(list), err)
	}
}
