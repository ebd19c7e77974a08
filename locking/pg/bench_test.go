package pg

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/lockertest"
)

// BenchmarkLockertest is the shared benchmark every backend runs.
func BenchmarkLockertest(b *testing.B) {
	c := newCluster(b)
	lockertest.Benchmark(b, func(tb testing.TB) locking.Locker {
		return c.openFor(tb, Options{MaxSessions: 32})
	})
}

// BenchmarkTryLockRelease compares one try-lock+release of this backend
// with baselines on the same server, in the same run:
//
//   - floor: bare pgx on one already-open connection, pg_try_advisory_lock
//     then pg_advisory_unlock (two round trips, no fence, no bookkeeping);
//   - fenced_floor: the same with this backend's fence: tryLockSQL (the
//     advisory lock and the fence upsert in one statement), then the
//     unlock, on one held connection per goroutine: what ours must stay
//     within 1.1x of, its sessions being shared and multiplexed;
//   - conn_per_lock: the naive backend, connect, lock, unlock, close.
//
// Each runs sequentially and with 16 goroutines (SetParallelism(8) on 2
// cores); the floor's parallel form holds one connection per goroutine.
func BenchmarkTryLockRelease(b *testing.B) {
	c := newCluster(b)
	oursWith := func(url string) func(b *testing.B) func(ctx context.Context, key string) error {
		return func(b *testing.B) func(ctx context.Context, key string) error {
			l := c.openFor(b, Options{URL: url, MaxSessions: 32})
			return lockRelease(l)
		}
	}
	// ours_durable asks for a durable commit of every fence write (the
	// server's synchronous_commit=on), to show what the default saves.
	durableURL := c.url + "&synchronous_commit=on"
	if !strings.Contains(c.url, "?") {
		durableURL = c.url + "?synchronous_commit=on"
	}
	floor := func(b *testing.B) func(ctx context.Context, key string) error {
		conn, err := pgx.Connect(context.Background(), c.url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(context.Background()) })
		return func(ctx context.Context, key string) error {
			id := lockID(c.ns, key)
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("lock %q: %v %v", key, ok, err)
			}
			if err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("unlock %q: %v %v", key, ok, err)
			}
			return nil
		}
	}
	// fencedFloor is the floor plus the fence: this backend's own
	// statements (the advisory lock and the fence upsert in one, then the
	// unlock) on one held connection, without the pool, the re-entrancy
	// guard or the handle.
	fencedFloor := func(b *testing.B) func(ctx context.Context, key string) error {
		conn, err := pgx.Connect(context.Background(), c.url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(context.Background()) })
		// The settings our sessions get (configureSessions), so that the
		// floor differs from ours only by the client.
		if _, err := conn.Exec(context.Background(), `SET synchronous_commit = off; SET jit = off; SET plan_cache_mode = force_generic_plan`); err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) error {
			id := lockID(c.ns, key)
			var (
				ok    bool
				fence *int64
				pid   uint32
			)
			if err := conn.QueryRow(ctx, tryLockSQL, id, c.ns, key, "bench").Scan(&ok, &fence, &pid); err != nil || !ok {
				return fmt.Errorf("lock %q: %v %v", key, ok, err)
			}
			if err := conn.QueryRow(ctx, releaseSQL, id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("unlock %q: %v %v", key, ok, err)
			}
			return nil
		}
	}
	connPerLock := func(b *testing.B) func(ctx context.Context, key string) error {
		return func(ctx context.Context, key string) error {
			conn, err := pgx.Connect(ctx, c.url)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			id := lockID(c.ns, key)
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("lock %q: %v %v", key, ok, err)
			}
			return conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, id).Scan(&ok)
		}
	}
	for _, impl := range []struct {
		name string
		// setup returns one worker's operation: shared is true when all
		// goroutines may share what setup made (ours: one Locker).
		setup  func(b *testing.B) func(ctx context.Context, key string) error
		shared bool
	}{
		{"ours", oursWith(c.url), true},
		{"ours_durable", oursWith(durableURL), true},
		{"floor", floor, false},
		{"fenced_floor", fencedFloor, false},
		{"conn_per_lock", connPerLock, true},
	} {
		b.Run(impl.name+"/sequential", func(b *testing.B) {
			op := impl.setup(b)
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := op(ctx, fmt.Sprintf("seq/%d", i%64)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(impl.name+"/parallel16", func(b *testing.B) {
			var sharedOp func(ctx context.Context, key string) error
			ops := make(chan func(ctx context.Context, key string) error, 8*runtime.GOMAXPROCS(0))
			if impl.shared {
				sharedOp = impl.setup(b)
			} else {
				for range 8 * runtime.GOMAXPROCS(0) {
					ops <- impl.setup(b)
				}
			}
			var worker atomic.Int64
			ctx := context.Background()
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				op := sharedOp
				if op == nil {
					op = <-ops
				}
				w := worker.Add(1)
				for i := 0; pb.Next(); i++ {
					if err := op(ctx, fmt.Sprintf("par/%d/%d", w, i%64)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func lockRelease(l *Locker) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		h, err := l.TryLock(ctx, key, time.Minute)
		if err != nil || h == nil {
			return fmt.Errorf("TryLock(%q) = %v, %v", key, h, err)
		}
		return l.Release(ctx, h)
	}
}

// BenchmarkTick measures one locked tick's backend work, TryLockTick then
// Release, and reports the requests it sends (roundtrips/op, counted on
// the session sockets: each flush of pgx's buffer is one round trip of a
// request/response protocol). prev_design is what a tick cost before the
// mark: TryLock, the claimed_until UPDATE that kept the tick claimed past
// its lock (replayed here on another column), and Release: three round
// trips.
func BenchmarkTick(b *testing.B) {
	c := newCluster(b)
	counted := func(b *testing.B) (*Locker, *atomic.Int64) {
		l := c.openFor(b, Options{MaxSessions: 32})
		var writes atomic.Int64
		l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
			return countingConn{Conn: conn, writes: &writes}, nil
		}
		return l, &writes
	}
	// Ticks at this clock's now, strictly increasing: each is granted
	// (a new key's missing mark counts as now - MaxSkew).
	var last atomic.Int64
	next := func() time.Time {
		for {
			p := last.Load()
			n := max(time.Now().UnixMicro(), p+1)
			if last.CompareAndSwap(p, n) {
				return time.UnixMicro(n)
			}
		}
	}
	tick := func(ctx context.Context, l *Locker, key string) error {
		req := locking.TickRequest{Key: key, Tick: next(),
			TTL: time.Minute, MaxSkew: 5 * time.Second, Window: time.Hour}
		ans, err := l.TryLockTick(ctx, req)
		if err != nil || ans.Verdict != locking.TickGranted {
			return fmt.Errorf("TryLockTick(%q) = %v, %v", key, ans.Verdict, err)
		}
		return l.Release(ctx, ans.Handle)
	}
	const prevClaimSQL = `UPDATE bext_lock_fences SET acquired_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE namespace = $1::text AND key = $2::text AND fence = $4::bigint`
	prev := func(ctx context.Context, l *Locker, key string) error {
		h, err := l.TryLock(ctx, key, time.Minute)
		if err != nil || h == nil {
			return fmt.Errorf("TryLock(%q) = %v, %v", key, h, err)
		}
		st, err := locking.HandleState(h, l)
		if err != nil {
			return err
		}
		sess := st.(*lease).sess
		if err := l.use(ctx, sess); err != nil {
			return err
		}
		_, err = sess.conn.Exec(ctx, prevClaimSQL, l.opts.Namespace, key, int64(10e6), h.Fence())
		l.release(sess)
		if err != nil {
			return err
		}
		return l.Release(ctx, h)
	}
	for _, impl := range []struct {
		name string
		op   func(ctx context.Context, l *Locker, key string) error
	}{
		{"try_lock_tick", tick},
		{"prev_design", prev},
	} {
		b.Run(impl.name+"/sequential", func(b *testing.B) {
			l, writes := counted(b)
			ctx := context.Background()
			if err := impl.op(ctx, l, "warm"); err != nil { // connect, prepare
				b.Fatal(err)
			}
			writes.Store(0)
			b.ReportAllocs()
			n := 0
			for i := 0; b.Loop(); i++ {
				if err := impl.op(ctx, l, fmt.Sprintf("seq/%d", i%64)); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(writes.Load())/float64(n), "roundtrips/op")
		})
		b.Run(impl.name+"/parallel16", func(b *testing.B) {
			l, _ := counted(b)
			var worker atomic.Int64
			ctx := context.Background()
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := worker.Add(1)
				for i := 0; pb.Next(); i++ {
					if err := impl.op(ctx, l, fmt.Sprintf("par/%d/%d", w, i%64)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkTryLockReleaseInterleaved is BenchmarkTryLockRelease's ours
// against fenced_floor, op by op: each iteration runs one try-lock+release
// of each, alternating which goes first, and times both, so a machine
// whose load changes from second to second (other processes, the server's
// own background work) weighs on both alike. Reported: each one's ns per
// op and their ratio (ours/floor), sequentially and on 16 goroutines (each
// with its own floor connection; ours is one Locker).
func BenchmarkTryLockReleaseInterleaved(b *testing.B) {
	c := newCluster(b)
	floorOp := func(b *testing.B) func(ctx context.Context, key string) error {
		conn, err := pgx.Connect(context.Background(), c.url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(context.Background()) })
		// The settings our sessions get (configureSessions), so that the
		// floor differs from ours only by the client.
		if _, err := conn.Exec(context.Background(), `SET synchronous_commit = off; SET jit = off; SET plan_cache_mode = force_generic_plan`); err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) error {
			id := lockID(c.ns, key)
			var (
				ok    bool
				fence *int64
				pid   uint32
			)
			if err := conn.QueryRow(ctx, tryLockSQL, id, c.ns, key, "bench").Scan(&ok, &fence, &pid); err != nil || !ok {
				return fmt.Errorf("lock %q: %v %v", key, ok, err)
			}
			if err := conn.QueryRow(ctx, releaseSQL, id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("unlock %q: %v %v", key, ok, err)
			}
			return nil
		}
	}
	run := func(b *testing.B, parallel bool) {
		ours := lockRelease(c.openFor(b, Options{MaxSessions: 32}))
		floors := make(chan func(ctx context.Context, key string) error, 16)
		for range cap(floors) {
			floors <- floorOp(b)
		}
		var oursNS, floorNS atomic.Int64
		var worker atomic.Int64
		ctx := context.Background()
		body := func(pb interface{ Next() bool }) {
			floor := <-floors
			w := worker.Add(1)
			for i := 0; pb.Next(); i++ {
				ops := [2]func(ctx context.Context, key string) error{ours, floor}
				sums := [2]*atomic.Int64{&oursNS, &floorNS}
				if i%2 == 1 {
					ops[0], ops[1], sums[0], sums[1] = ops[1], ops[0], sums[1], sums[0]
				}
				for k := range ops {
					start := time.Now()
					if err := ops[k](ctx, fmt.Sprintf("il/%d/%d/%d", k, w, i%64)); err != nil {
						b.Error(err)
						return
					}
					sums[k].Add(int64(time.Since(start)))
				}
			}
		}
		b.ResetTimer()
		if parallel {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) { body(pb) })
		} else {
			body(loopNext{b})
		}
		b.ReportMetric(float64(oursNS.Load())/float64(b.N), "ours-ns/op")
		b.ReportMetric(float64(floorNS.Load())/float64(b.N), "floor-ns/op")
		b.ReportMetric(float64(oursNS.Load())/float64(floorNS.Load()), "ours/floor")
	}
	b.Run("sequential", func(b *testing.B) { run(b, false) })
	b.Run("parallel16", func(b *testing.B) { run(b, true) })
}

// loopNext is b.Loop as a pb.Next.
type loopNext struct{ b *testing.B }

func (l loopNext) Next() bool { return l.b.Loop() }
