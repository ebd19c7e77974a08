package pg

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// with its own floor connection; ours is one Locker), and the Postgres
// backends' CPU per op (utime+stime of /proc/<pid>/stat, so only when the
// server runs on this machine): ours' sessions against the floor's
// connections, and their ratio.
//
// Ours opens its sessions before the timer, as the floor its connections
// (each holds them for its life): what is compared is the steady state,
// not a first connect, which at a small b.N (a loaded machine) would be
// most of ours' time.
func BenchmarkTryLockReleaseInterleaved(b *testing.B) {
	c := newCluster(b)
	floorOp := func(b *testing.B) (func(ctx context.Context, key string) error, uint32) {
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
		}, conn.PgConn().PID()
	}
	run := func(b *testing.B, parallel bool) {
		l := c.openFor(b, Options{MaxSessions: 32})
		ours := lockRelease(l)
		n := 1
		if parallel {
			n = 16
		}
		oursPIDs := openSessions(b, l, n)
		floors := make(chan func(ctx context.Context, key string) error, 16)
		var floorPIDs []uint32
		for range cap(floors) {
			op, pid := floorOp(b)
			floors <- op
			floorPIDs = append(floorPIDs, pid)
		}
		var oursNS, floorNS atomic.Int64
		var worker atomic.Int64
		// Each op's time, for the medians: a loaded machine's stalls
		// (tens of ms, now on one side, now on the other) move the means.
		var (
			tmu                sync.Mutex
			oursTimes, flTimes []int64
		)
		ctx := context.Background()
		body := func(pb interface{ Next() bool }) {
			floor := <-floors
			w := worker.Add(1)
			var times [2][]int64
			defer func() {
				tmu.Lock()
				oursTimes, flTimes = append(oursTimes, times[0]...), append(flTimes, times[1]...)
				tmu.Unlock()
			}()
			for i := 0; pb.Next(); i++ {
				ops := [2]func(ctx context.Context, key string) error{ours, floor}
				sums := [2]*atomic.Int64{&oursNS, &floorNS}
				side := [2]int{0, 1}
				if i%2 == 1 {
					ops[0], ops[1], sums[0], sums[1], side = ops[1], ops[0], sums[1], sums[0], [2]int{1, 0}
				}
				for k := range ops {
					start := time.Now()
					if err := ops[k](ctx, fmt.Sprintf("il/%d/%d/%d", k, w, i%64)); err != nil {
						b.Error(err)
						return
					}
					d := int64(time.Since(start))
					sums[k].Add(d)
					times[side[k]] = append(times[side[k]], d)
				}
			}
		}
		oursCPU0, floorCPU0 := backendCPU(oursPIDs), backendCPU(floorPIDs)
		b.ResetTimer()
		if parallel {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) { body(pb) })
		} else {
			body(loopNext{b})
		}
		b.StopTimer()
		b.ReportMetric(float64(oursNS.Load())/float64(b.N), "ours-ns/op")
		b.ReportMetric(float64(floorNS.Load())/float64(b.N), "floor-ns/op")
		b.ReportMetric(float64(oursNS.Load())/float64(floorNS.Load()), "ours/floor")
		if op50, fp50 := median(oursTimes), median(flTimes); fp50 > 0 {
			b.ReportMetric(float64(op50), "ours-p50-ns")
			b.ReportMetric(float64(fp50), "floor-p50-ns")
			b.ReportMetric(float64(op50)/float64(fp50), "p50-ours/floor")
		}
		if now := sessionPIDs(l); !slices.Equal(now, oursPIDs) {
			b.Logf("ours' sessions changed during the run (%v, then %v): no server CPU", oursPIDs, now)
			return
		}
		oursCPU, floorCPU := backendCPU(oursPIDs)-oursCPU0, backendCPU(floorPIDs)-floorCPU0
		if oursCPU0 < 0 || floorCPU0 < 0 || floorCPU <= 0 {
			return // not this machine's Postgres
		}
		b.ReportMetric(float64(oursCPU)/float64(b.N), "ours-srv-ns/op")
		b.ReportMetric(float64(floorCPU)/float64(b.N), "floor-srv-ns/op")
		b.ReportMetric(float64(oursCPU)/float64(floorCPU), "srv-ours/floor")
	}
	b.Run("sequential", func(b *testing.B) { run(b, false) })
	b.Run("parallel16", func(b *testing.B) { run(b, true) })
}

// median of ts (sorted in place); 0 for none.
func median(ts []int64) int64 {
	if len(ts) == 0 {
		return 0
	}
	slices.Sort(ts)
	return ts[len(ts)/2]
}

// openSessions has l open n sessions (each held while the next is
// acquired, so acquire opens another), ready for the lock statements, and
// returns their backend pids.
func openSessions(b *testing.B, l *Locker, n int) []uint32 {
	b.Helper()
	ctx, cancel := l.stmtCtx(context.Background())
	defer cancel()
	var held []*session
	for range n {
		s, _, err := l.acquireReady(ctx)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, s)
	}
	for _, s := range held {
		l.release(s)
	}
	return sessionPIDs(l)
}

// sessionPIDs are the backend pids of l's open sessions, sorted.
func sessionPIDs(l *Locker) []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var pids []uint32
	for _, s := range l.sessions {
		pids = append(pids, s.pid)
	}
	slices.Sort(pids)
	return pids
}

// backendCPU sums the CPU time (in ns) the Postgres backends pids used so
// far, read from /proc: schedstat's run time, to the nanosecond, where the
// kernel has it, else utime+stime from stat (in 10 ms ticks, which a short
// run rounds off); -1 when one cannot be read (the server runs elsewhere).
func backendCPU(pids []uint32) int64 {
	var sum int64
	for _, pid := range pids {
		ns := schedstatNS(pid)
		if ns < 0 {
			ns = statNS(pid)
		}
		if ns < 0 {
			return -1
		}
		sum += ns
	}
	return sum
}

// schedstatNS is the first field of /proc/<pid>/schedstat: the time the
// task ran on a CPU, in ns; -1 if unreadable.
func schedstatNS(pid uint32) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) < 1 {
		return -1
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return -1
	}
	return ns
}

// statNS is utime+stime of /proc/<pid>/stat in ns; -1 if unreadable.
func statNS(pid uint32) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14 and stime 15 (proc(5)), in clock ticks.
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (ut + st) * int64(time.Second) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// loopNext is b.Loop as a pb.Next.
type loopNext struct{ b *testing.B }

func (l loopNext) Next() bool { return l.b.Loop() }

// BenchmarkSessionOpen is what `lock run` pays once per run on top of the
// try-lock+release: a new Locker's first TryLock+Release (connecting,
// probing and setting up its session, finding the table, preparing the
// statements) against the fenced floor's first op on a new connection
// (connect, SET our settings, the two statements), alternately, and the
// Postgres backend's whole CPU for each (what its /proc says once the op
// is done: the backend's start included). The server CPU is reported only
// when Postgres runs on this machine.
func BenchmarkSessionOpen(b *testing.B) {
	c := newCluster(b)
	ctx := context.Background()
	// The table exists, as it does on every run but a cluster's first.
	if err := lockRelease(c.openFor(b, Options{}))(ctx, "open/warm"); err != nil {
		b.Fatal(err)
	}
	// Each returns the backend's pid and the close, which the caller
	// runs once it has read the backend's CPU (a closed one is gone).
	ours := func(key string) (uint32, func(), error) {
		l, err := Open(ctx, Options{URL: c.url, Namespace: c.ns})
		if err != nil {
			return 0, nil, err
		}
		done := func() { _ = l.Close(ctx) }
		if err := lockRelease(l)(ctx, key); err != nil {
			done()
			return 0, nil, err
		}
		return sessionPIDs(l)[0], done, nil
	}
	floor := func(key string) (uint32, func(), error) {
		conn, err := pgx.Connect(ctx, c.url)
		if err != nil {
			return 0, nil, err
		}
		done := func() { _ = conn.Close(ctx) }
		if _, err := conn.Exec(ctx, `SET synchronous_commit = off; SET jit = off; SET plan_cache_mode = force_generic_plan`); err != nil {
			done()
			return 0, nil, err
		}
		id := lockID(c.ns, key)
		var (
			ok    bool
			fence *int64
			pid   uint32
		)
		if err := conn.QueryRow(ctx, tryLockSQL, id, c.ns, key, "bench").Scan(&ok, &fence, &pid); err != nil || !ok {
			done()
			return 0, nil, fmt.Errorf("lock %q: %v %v", key, ok, err)
		}
		if err := conn.QueryRow(ctx, releaseSQL, id).Scan(&ok); err != nil || !ok {
			done()
			return 0, nil, fmt.Errorf("unlock %q: %v %v", key, ok, err)
		}
		return pid, done, nil
	}
	var wall, srv [2]int64
	srvOK := true
	for i := 0; b.Loop(); i++ {
		sides := [2]int{0, 1}
		if i%2 == 1 {
			sides = [2]int{1, 0}
		}
		for _, side := range sides {
			op := ours
			if side == 1 {
				op = floor
			}
			start := time.Now()
			pid, done, err := op(fmt.Sprintf("open/%d", i%64))
			if err != nil {
				b.Fatal(err)
			}
			wall[side] += int64(time.Since(start))
			cpu := backendCPU([]uint32{pid})
			done() // after the read: an ended backend has no /proc
			if cpu < 0 {
				srvOK = false
			}
			srv[side] += cpu
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(wall[0])/n, "ours-ns/op")
	b.ReportMetric(float64(wall[1])/n, "floor-ns/op")
	b.ReportMetric(float64(wall[0])/float64(wall[1]), "ours/floor")
	if srvOK {
		b.ReportMetric(float64(srv[0])/n, "ours-srv-ns/op")
		b.ReportMetric(float64(srv[1])/n, "floor-srv-ns/op")
		b.ReportMetric(float64(srv[0])/float64(srv[1]), "srv-ours/floor")
	}
}
