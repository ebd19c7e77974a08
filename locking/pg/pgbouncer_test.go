package pg

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// TestPgBouncerTransactionPoolRefused: behind a real PgBouncer in
// transaction mode with one server connection, advisory locks of two
// clients land on one backend and are re-entrant for both. Every call is
// refused with ErrTransactionPooler, naming PgBouncer, and Ping (readiness)
// fails; two lockers never both hold a key.
func TestPgBouncerTransactionPoolRefused(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "transaction", 1)
	var lockers []*Locker
	for range 4 {
		lockers = append(lockers, c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second}))
	}
	a, b := lockers[0], lockers[1]
	ctx := context.Background()

	var (
		mu      sync.Mutex
		handles int
		errs    []error
		wg      sync.WaitGroup
	)
	for _, l := range lockers {
		wg.Go(func() {
			h, err := l.TryLock(ctx, "backup", time.Minute)
			mu.Lock()
			defer mu.Unlock()
			if h != nil {
				handles++
			}
			errs = append(errs, err)
		})
	}
	wg.Wait()
	if handles > 0 {
		t.Errorf("%d handles for one key through a transaction pool; want none", handles)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrTransactionPooler) || errors.Is(err, locking.ErrUnavailable) {
			t.Errorf("TryLock through a transaction pool = %v; want ErrTransactionPooler, not ErrUnavailable", err)
		} else if !strings.Contains(err.Error(), "PgBouncer") {
			t.Errorf("the error does not name the pooler: %v", err)
		}
	}
	if err := a.Ping(ctx); !errors.Is(err, ErrTransactionPooler) {
		t.Errorf("Ping through a transaction pool = %v; want ErrTransactionPooler (readiness must fail)", err)
	}
	_, err := b.TryLockTick(ctx, tickReq("sched", c.dbNow().Truncate(time.Second)))
	if !errors.Is(err, ErrTransactionPooler) {
		t.Errorf("TryLockTick through a transaction pool = %v; want ErrTransactionPooler", err)
	}
	t.Logf("refused with: %v", errs[0])
	if n := c.holderPID("backup"); n != 0 {
		t.Errorf("backend %d still holds the key after every call was refused", n)
	}
}

// TestPgBouncerStatementCacheReadsAsPooler: pgx's statement cache meets
// another client's prepared statement on a shared server connection. Even
// when the pooler test was passed (here: its verdict preset, as for a
// pooler switched to transaction mode after the test), the error names the
// pooler, not an outage.
func TestPgBouncerStatementCacheReadsAsPooler(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "transaction", 1)
	a := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	b := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	a.pooler.set(nil)
	b.pooler.set(nil)
	ctx := context.Background()
	h, err := a.TryLock(ctx, "k1", time.Minute)
	if err != nil || h == nil {
		t.Fatalf("first client through the pool: %v, %v", h, err)
	}
	_, err = b.TryLock(ctx, "k2", time.Minute)
	if !errors.Is(err, ErrTransactionPooler) || errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("second client through the pool = %v; want ErrTransactionPooler", err)
	}
	if !strings.Contains(err.Error(), "prepared statement") {
		t.Errorf("error does not show what happened: %v", err)
	}
	t.Logf("%v", err)
}

// TestPgBouncerSessionPoolWorks: a stock PgBouncer in session mode passes
// (the settings a session needs are applied after connecting, so PgBouncer
// does not refuse the startup packet), and locks behave as direct.
func TestPgBouncerSessionPoolWorks(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "session", 4)
	a := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	b := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	ctx := context.Background()
	if err := a.Ping(ctx); err != nil {
		t.Fatalf("Ping through a session pool: %v", err)
	}
	h := mustLock(t, a, "k")
	mustContend(t, b, "k")
	if err := a.Renew(ctx, h); err != nil {
		t.Fatal(err)
	}
	var sc, idle string
	if err := h2lease(t, a, h).sess.conn.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('tcp_keepalives_idle')`).Scan(&sc, &idle); err != nil {
		t.Fatal(err)
	}
	if sc != "off" || idle != "3" {
		t.Errorf("session settings through the pool: synchronous_commit %q, tcp_keepalives_idle %q; want off, 3", sc, idle)
	}
	if err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	tick := c.dbNow().Truncate(time.Second)
	ans := mustTick(t, b, tickReq("sched", tick), locking.TickGranted, "tick through a session pool")
	mustTick(t, a, tickReq("sched", tick), locking.TickDone, "same tick, other client")
	mustTick(t, a, tickReq("sched", tick.Add(time.Second)), locking.TickContended, "next tick while held")
	// A client that leaves without releasing: PgBouncer resets its server
	// connection (DISCARD ALL) and the lock is gone, never inherited.
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_ = ans
	waitFree(t, a, "sched")
}

// TestPgBouncerAdminConsoleRefused: a URL naming PgBouncer's admin console
// is refused as a pooler before any query.
func TestPgBouncerAdminConsoleRefused(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "session", 1)
	l := c.open(Options{URL: bouncer.AdminURL(), OpTimeout: 3 * time.Second})
	_, err := l.TryLock(context.Background(), "k", time.Minute)
	if !errors.Is(err, ErrTransactionPooler) || !strings.Contains(err.Error(), "admin console") {
		t.Fatalf("TryLock on the admin console = %v; want ErrTransactionPooler naming the admin console", err)
	}
}
