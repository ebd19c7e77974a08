package pg

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/internal/testenv"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/lockertest"
)

// suiteSessions is MaxSessions for the conformance suite: a session holds
// any number of locks, so this bounds connections only (the suite holds
// 10,000 keys at once over them).
const suiteSessions = 16

func TestConformance(t *testing.T) {
	nowConn, err := pgx.Connect(context.Background(), testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// Not deferred: the cases run in parallel, after this function returns.
	t.Cleanup(func() { nowConn.Close(context.Background()) })
	suiteNow = func(t testing.TB) time.Time {
		nowMu.Lock()
		defer nowMu.Unlock()
		var now time.Time
		if err := nowConn.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatalf("reading the database clock: %v", err)
		}
		return now
	}
	backend := lockertest.Backend{
		New: func(t testing.TB) locking.Locker {
			// One cluster per suite case: its lockers share a namespace.
			return clusterOf(t).open(Options{MaxSessions: suiteSessions})
		},
		Expire:    func(t testing.TB, key string) { clusterOf(t).kill(key) },
		TTLExpiry: false,
		Parallel:  true, // each case has a namespace of its own
		MaxHeld:   0,    // sessions are shared: no limit on locks held
		Now:       func() time.Time { return suiteNow(t) },
		ForgetMark: func(t testing.TB, key string) {
			c := clusterOf(t)
			// The mark alone, as Backend.ForgetMark asks: the row's
			// fence, pause flag and tick_grants stay.
			c.exec(`UPDATE bext_lock_fences SET tick_mark = NULL WHERE namespace = $1 AND key = $2`, c.ns, key)
		},
		// A session whose reply went missing is never used again: its
		// end gives its locks back, the grants stay in the rows.
		LoseReply: func(t testing.TB, lockKey string) { clusterOf(t).kill(lockKey) },
		// Advisory locks have no TTL: what ends with a grant's lease is
		// the lease end its tick_grants entry records (its fourth element),
		// after which a resend is decided as one of a lapsed grant.
		EndLease: func(t testing.TB, r locking.TickRequest, d time.Duration) {
			c := clusterOf(t)
			c.exec(`UPDATE bext_lock_fences SET tick_grants = jsonb_set(tick_grants, ARRAY[$3::text, '3'],
				to_jsonb((extract(epoch FROM clock_timestamp()) * 1000000)::bigint + $4::bigint))
				WHERE namespace = $1 AND key = $2 AND tick_grants -> $3::text IS NOT NULL`,
				c.ns, r.Key, strconv.FormatInt(r.Tick.UnixMicro(), 10), d.Microseconds())
		},
	}
	lockertest.Run(t, backend)
	// The scheduler sends ticks that wait together through TryLockTicks
	// (a batch of tick statements in one transaction), and releases
	// through ReleaseAll: that path must answer every rule of the mark
	// exactly as TryLockTick and Release do.
	batched := backend
	batched.New = func(t testing.TB) locking.Locker { return batchedLocker{backend.New(t).(*Locker)} }
	t.Run("batched", func(t *testing.T) { lockertest.RunTicks(t, batched) })
}

// batchedLocker answers TryLockTick through a one-request TryLockTicks,
// and Release through a one-handle ReleaseAll, the scheduler's paths.
type batchedLocker struct{ *Locker }

func (b batchedLocker) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	answers, errs := b.TryLockTicks(ctx, []locking.TickRequest{req})
	return answers[0], errs[0]
}

func (b batchedLocker) Release(ctx context.Context, h *locking.Handle) error {
	return b.ReleaseAll(ctx, []*locking.Handle{h})[0]
}

// suiteNow reads the database clock (clock_timestamp(), what
// try-lock-tick decides on) on one connection of TestConformance.
var (
	nowMu    sync.Mutex
	suiteNow func(t testing.TB) time.Time
)

// clusters maps each suite case to its cluster, so New and Expire of one
// case share a namespace. The key is the case's whole test name: its name
// has slashes of its own ("Tick/AnswerNow"), and the cases run at once,
// so a prefix of it would be shared by cases that must not share.
var (
	clustersMu sync.Mutex
	clusters   = map[string]*cluster{}
)

func clusterOf(t testing.TB) *cluster {
	t.Helper()
	name := t.Name()
	clustersMu.Lock()
	defer clustersMu.Unlock()
	if c, ok := clusters[name]; ok {
		return c
	}
	c := newCluster(t)
	clusters[name] = c
	t.Cleanup(func() {
		clustersMu.Lock()
		delete(clusters, name)
		clustersMu.Unlock()
	})
	return c
}
