package pg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/locking"
)

// proxied returns the cluster's URL pointing at a fault proxy in front of
// the real server.
func (c *cluster) proxied() (*faultproxy.Proxy, string) {
	c.t.Helper()
	u, err := url.Parse(c.url)
	if err != nil || u.Host == "" {
		c.t.Fatalf("these tests need BEXT_TEST_PG_URL as a postgres:// URL with a TCP host, got %q", c.url)
	}
	p := faultproxy.Start(c.t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

// TestRenewReleaseOutageIsUnavailable: when Postgres cannot answer, Renew
// and Release report the lock lost AND the backend unavailable, so the
// outage is counted as one and readiness notices.
func TestRenewReleaseOutageIsUnavailable(t *testing.T) {
	for _, fault := range []string{"blackhole", "cut"} {
		t.Run(fault, func(t *testing.T) {
			c := newCluster(t)
			p, u := c.proxied()
			l := c.open(Options{URL: u, OpTimeout: 2 * time.Second}) // a loaded CI machine connects and creates the table slowly
			ctx := context.Background()
			h1 := mustLock(t, l, "renewed")
			tick := c.dbNow().Truncate(time.Second)
			ans := mustTick(t, l, tickReq("released", tick), locking.TickGranted, "tick")
			if fault == "blackhole" {
				p.Blackhole()
			} else {
				p.Cut()
			}
			err := l.Renew(ctx, h1)
			if !errors.Is(err, locking.ErrLockLost) || !errors.Is(err, locking.ErrUnavailable) {
				t.Errorf("Renew during a %s = %v; want ErrLockLost and ErrUnavailable", fault, err)
			}
			err = l.Release(ctx, ans.Handle)
			if !errors.Is(err, locking.ErrLockLost) || !errors.Is(err, locking.ErrUnavailable) {
				t.Errorf("Release during a %s = %v; want ErrLockLost and ErrUnavailable", fault, err)
			}
			p.Heal()
		})
	}
}

// TestRenewLostIsNotUnavailable: a lock Postgres answers is gone is lost,
// not an outage.
func TestRenewLostIsNotUnavailable(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	h := mustLock(t, l, "k")
	hi, lo := splitID(lockID(c.ns, "k"))
	// The session answers, but no longer holds the lock.
	ls := h2lease(t, l, h)
	if _, err := ls.sess.conn.Exec(context.Background(), `SELECT pg_advisory_unlock(($1::bigint << 32) | $2::bigint)`, hi, lo); err != nil {
		t.Fatal(err)
	}
	err := l.Renew(context.Background(), h)
	if !errors.Is(err, locking.ErrLockLost) || errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Renew of a lock Postgres says is gone = %v; want ErrLockLost only", err)
	}
}

// TestCloseHonoursDeadline: against a blackholed server, Close returns by
// its context's deadline (it used to take OpTimeout per held lock, one
// after the other, plus a second per session), with locks held, idle
// sessions and a TryLock in flight.
func TestCloseHonoursDeadline(t *testing.T) {
	c := newCluster(t)
	p, u := c.proxied()
	l, err := Open(context.Background(), Options{URL: u, Namespace: c.ns, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		mustLock(t, l, k)
	}
	idle := mustLock(t, l, "idle")
	if err := l.Release(ctx, idle); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	inFlight := make(chan error, 1)
	go func() {
		_, err := l.TryLock(ctx, "d", time.Minute) // takes the session, then hangs
		inFlight <- err
	}()
	for {
		l.mu.Lock()
		n := l.sessions[0].busy
		l.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond) // until the TryLock took the session
	}
	const deadline = 500 * time.Millisecond
	cctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	_ = l.Close(cctx)
	if took := time.Since(start); took > deadline+time.Second {
		t.Errorf("Close with a %v deadline took %v against a blackholed server", deadline, took)
	}
	if err := <-inFlight; err == nil {
		t.Error("the TryLock in flight succeeded against a blackholed server")
	}
	p.Heal()
	// The server ends the abandoned sessions when their sockets close.
	b := c.open(Options{})
	for _, k := range []string{"a", "b", "c"} {
		waitFree(t, b, k)
	}
}

// waitFree takes and releases key, asking until its old session is gone.
func waitFree(t *testing.T, l *Locker, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := l.TryLock(context.Background(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if h != nil {
			if err := l.Release(context.Background(), h); err != nil {
				t.Fatal(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held 10s after its Locker closed", key)
		}
		time.Sleep(20 * time.Millisecond) // the server tells nobody when a backend ends
	}
}

// TestTickResentAfterLostReply: the reply of a granted try-lock-tick is
// lost (the statement ran, the link died before its answer came back).
// The same request resent from a fresh session is answered from its own
// claim: an error while the first session still holds the lock (never
// done, never granted twice), then granted with the fence the first call
// drew once that session is gone; another request for T is done.
func TestTickResentAfterLostReply(t *testing.T) {
	c := newCluster(t)
	p, u := c.proxied()
	a := c.open(Options{URL: u, OpTimeout: time.Second, MaxSessions: 1})
	b := c.open(Options{})
	ctx := context.Background()
	if err := b.InitMarks(ctx, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	// Another lock on a's one session: a gives the session up when the
	// call fails, but keeps it open for that lock's holder's sake
	// (abandon), so the first call's lock stays held meanwhile.
	mustLock(t, a, "pin")
	tick := c.dbNow().Add(time.Second).Truncate(time.Second)
	req := tickReq("k", tick)
	req.Token = "token-of-the-first-call"

	// Hold the row so a's statement waits on the server, then cut the
	// replies off while it waits.
	tx, err := c.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM bext_lock_fences WHERE namespace = $1 AND key = 'k' FOR UPDATE`, c.ns); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.TryLockTick(ctx, req)
		done <- err
	}()
	c.waitBlocked()
	p.Blackhole()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("TryLockTick answered through a blackholed link")
	} else {
		t.Logf("first call: %v", err)
	}
	var fence int64
	var tok string
	if err := c.admin.QueryRow(ctx, `SELECT fence, tick_token FROM bext_lock_fences WHERE namespace = $1 AND key = 'k'`, c.ns).Scan(&fence, &tok); err != nil {
		t.Fatal(err)
	}
	if tok != req.Token {
		t.Fatalf("the first call did not claim T on the server (token %q): the test lost its race", tok)
	}
	// The first call's session still lives on the server (a keeps its
	// socket open for the pinned lock's lease) and holds the lock.
	got, err := b.TryLockTick(ctx, req)
	if !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("resent while the first session holds the lock = %+v, %v, want ErrUnavailable (holder %d, b's sessions %v)", got, err, c.holderPID("k"), b.sessionPIDs())
	}
	p.Cut() // the server now sees the first session's socket close
	deadline := time.Now().Add(10 * time.Second)
	for c.holderPID("k") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first call's session still holds the lock 10s after its socket closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ans := mustTick(t, b, req, locking.TickGranted, "resent after the first session ended")
	if ans.Handle.Fence() != fence {
		t.Errorf("resent call's fence %d, want the first call's %d", ans.Handle.Fence(), fence)
	}
	other := c.open(Options{})
	mustTick(t, other, tickReq("k", tick), locking.TickDone, "another request for T while the resent call holds the lock")
	mustTick(t, other, tickReq("k", tick.Add(time.Second)), locking.TickContended, "the next tick while the resent call holds the lock")
	if err := b.Release(ctx, ans.Handle); err != nil {
		t.Fatal(err)
	}
	mustTick(t, other, tickReq("k", tick), locking.TickDone, "another request for T")
	mustTick(t, b, req, locking.TickDone, "the resent request after its run released")
}

// TestPerTickBatchResentAfterLostReply: a batch holding two per-tick
// requests of one schedule (T1, then T2) whose reply is lost, resent with
// the same tokens. The second must not be decided before the first's
// answer is known: decided in one transaction, T2's grant overwrote T1's
// token in the schedule's row, and T1's resend was answered done, though
// T1 was granted on the server (its session still holding the lock): T1
// ran nowhere. A resent call is never answered done (DESIGN, rules of
// the mark).
func TestPerTickBatchResentAfterLostReply(t *testing.T) {
	c := newCluster(t)
	p, u := c.proxied()
	a := c.open(Options{URL: u, OpTimeout: time.Second})
	b := c.open(Options{})
	ctx := context.Background()
	if err := b.InitMarks(ctx, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	now := c.dbNow().Add(time.Second).Truncate(time.Second)
	reqs := make([]locking.TickRequest, 2)
	for i := range reqs {
		reqs[i] = tickReq("k", now.Add(time.Duration(i)*time.Millisecond))
		reqs[i].PerTick = true
		reqs[i].Token = fmt.Sprintf("token-of-T%d", i+1)
	}
	// Hold the row so a's batch waits on the server, then cut the replies
	// off while it waits.
	tx, err := c.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM bext_lock_fences WHERE namespace = $1 AND key = 'k' FOR UPDATE`, c.ns); err != nil {
		t.Fatal(err)
	}
	done := make(chan []error, 1)
	go func() {
		_, errs := a.TryLockTicks(ctx, reqs)
		done <- errs
	}()
	c.waitBlocked()
	p.Blackhole()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range <-done {
		if err == nil {
			t.Fatalf("request %d answered through a blackholed link", i)
		}
	}
	answers, errs := b.TryLockTicks(ctx, reqs)
	for i := range reqs {
		t.Logf("T%d resent: %v, %v", i+1, answers[i].Verdict, errs[i])
	}
	if errs[0] == nil && answers[0].Verdict == locking.TickDone {
		t.Fatal("T1 resent after the batch's lost reply was answered done: granted on the server, it now runs nowhere")
	}
	for i := range answers {
		if answers[i].Handle != nil {
			if err := b.Release(ctx, answers[i].Handle); err != nil {
				t.Error(err)
			}
		}
	}
	p.Cut()
}

// TestTurn3LateReplyLosesGrantedTick: the Postgres twin of the Redis test.
// A try-lock-tick whose reply comes after OpTimeout was granted on the
// server (lock taken, mark raised, committed); the client gave its session
// up. The caller drew the token itself and resends the same request with
// it, as the scheduler does on an answer that is not definite, until it is
// decided: granted with the first grant's fence, while node B, asking the
// same T with its own token, is not granted.
func TestTurn3LateReplyLosesGrantedTick(t *testing.T) {
	c := newCluster(t)
	p, u := c.proxied()
	ctx := context.Background()
	a := c.open(Options{URL: u, OpTimeout: 300 * time.Millisecond, Holder: "node-a"})
	b := c.open(Options{Holder: "node-b"})
	// A session made, and the table seen, before the delay: tries, as
	// connecting within 300 ms can fail on a loaded machine.
	for i := 0; ; i++ {
		warm, err := a.TryLockTick(ctx, tickReq(fmt.Sprintf("warm-%d", i), c.dbNow()))
		if err == nil && warm.Handle != nil {
			if err := a.Release(ctx, warm.Handle); err != nil {
				t.Fatal(err)
			}
			break
		}
		if i == 20 {
			t.Fatalf("A could not warm its session: %v, %v", warm.Verdict, err)
		}
	}
	req := tickReq("late", c.dbNow())
	req.MaxSkew = time.Minute
	var err error
	if req.Token, err = locking.NewToken(); err != nil {
		t.Fatal(err)
	}
	p.Delay(200 * time.Millisecond)
	_, err = a.TryLockTick(ctx, req)
	p.Delay(0)
	if err == nil {
		t.Skip("reply came in time")
	}
	// The server cannot tell us when the statement committed; we ask it.
	var fence int64
	for deadline := time.Now().Add(5 * time.Second); ; {
		var tokTick *int64
		err := c.admin.QueryRow(ctx, `SELECT fence, token_tick FROM bext_lock_fences WHERE namespace = $1 AND key = $2 AND tick_token = $3`,
			c.ns, req.Key, req.Token).Scan(&fence, &tokTick)
		if err == nil && tokTick != nil && *tokTick == req.Tick.UnixMicro() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the statement never committed on the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	other := req
	other.Token = "" // node B, same T, its own token
	if ans, err := b.TryLockTick(ctx, other); err != nil || ans.Verdict == locking.TickGranted {
		t.Fatalf("node B at the granted T = %v, %v; want done or contended", ans.Verdict, err)
	}
	// A resends the same request, same token, while the answer is not
	// definite (resend_held: the server has not yet dropped the session of
	// the first attempt; it does within MaxLease).
	var again locking.TickAnswer
	for deadline := time.Now().Add(a.MaxLease() + 5*time.Second); ; {
		again, err = a.TryLockTick(ctx, req)
		if !errors.Is(err, locking.ErrUnavailable) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || again.Verdict != locking.TickGranted {
		t.Fatalf("granted on the server, yet A's resend with the same token is told %v, %v: it runs nowhere", again.Verdict, err)
	}
	if again.Handle.Fence() != fence {
		t.Fatalf("A's resend granted with fence %d, want the first grant's %d", again.Handle.Fence(), fence)
	}
	if err := a.Release(ctx, again.Handle); err != nil {
		t.Fatal(err)
	}
}
