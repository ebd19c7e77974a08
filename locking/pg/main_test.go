package pg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// cluster is one test's namespace: the lockers it opens act as nodes of one
// cluster, and an admin connection does what an operator would.
type cluster struct {
	t     testing.TB
	url   string
	ns    string
	admin *pgx.Conn
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	url := testenv.PGURL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	c := &cluster{t: t, url: url, ns: testenv.UniqueName(t), admin: admin}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The table may not exist if no test locked anything yet.
		if _, err := admin.Exec(ctx, `DELETE FROM bext_lock_fences WHERE namespace = $1`, c.ns); err != nil {
			t.Logf("cleaning fence rows: %v", err)
		}
		cleanClusterRows(ctx, t, admin, c.ns)
		admin.Close(ctx)
	})
	return c
}

// open returns a Locker in the cluster's namespace, closed at cleanup.
func (c *cluster) open(opts Options) *Locker {
	c.t.Helper()
	return c.openFor(c.t, opts)
}

// openFor is open with the Locker closed when tb ends (a sub-benchmark).
func (c *cluster) openFor(tb testing.TB, opts Options) *Locker {
	tb.Helper()
	if opts.URL == "" {
		opts.URL = c.url
	}
	if opts.Namespace == "" {
		opts.Namespace = c.ns
	}
	l, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// holderPID finds the backend holding key's advisory lock, 0 if none.
func (c *cluster) holderPID(key string) int32 {
	c.t.Helper()
	hi, lo := splitID(lockID(c.ns, key))
	var pid int32
	err := c.admin.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND classid::bigint = $1 AND objid::bigint = $2
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, hi, lo).Scan(&pid)
	if err != nil {
		c.t.Fatalf("finding the holder of %q: %v", key, err)
	}
	return pid
}

// kill terminates the session holding key's lock and waits until that
// backend is gone (pg_terminate_backend's timeout argument waits for it).
func (c *cluster) kill(key string) {
	c.t.Helper()
	pid := c.holderPID(key)
	if pid == 0 {
		c.t.Fatalf("no session holds %q", key)
	}
	var done bool
	if err := c.admin.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&done); err != nil {
		c.t.Fatalf("terminating backend %d: %v", pid, err)
	}
	if !done {
		c.t.Fatalf("backend %d holding %q did not end within 10s", pid, key)
	}
	if p := c.holderPID(key); p != 0 {
		c.t.Fatalf("after terminating %d, backend %d still holds %q", pid, p, key)
	}
}

func mustLock(t testing.TB, l locking.Locker, key string) *locking.Handle {
	t.Helper()
	h, err := l.TryLock(context.Background(), key, time.Minute)
	if err != nil || h == nil {
		t.Fatalf("TryLock(%q) = %v, %v; want a handle", key, h, err)
	}
	return h
}

func mustContend(t testing.TB, l locking.Locker, key string) {
	t.Helper()
	h, err := l.TryLock(context.Background(), key, time.Minute)
	if err != nil || h != nil {
		t.Fatalf("TryLock(%q) = %v, %v; want contended (nil, nil)", key, h, err)
	}
}

// explain runs EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) of query in tx and
// returns its lines. EXPLAIN takes no parameters: the simple protocol
// writes args in, so the plan is a custom plan of them.
func explain(t *testing.T, tx pgx.Tx, query string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+query,
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return plan
}
