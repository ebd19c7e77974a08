package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/rendezvous"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// BenchmarkBurstRedis is the burst on Redis: 10,000 require_global
// schedules due in the same second, three schedulers (nodes) in one
// process sharing the real Redis. Reported: the lateness of the runs'
// starts (from T until the one node granted T starts its job), p50, p99
// and max; the target is a p99 under 100 ms. handoff=off: each node asks
// for every tick. handoff=on: the nodes know each other (a fixed
// rendezvous.Peers) and only a tick's preferred node asks at once; the
// others wait their turn and drop the tick when they hear its mark raised
// (handoff.go). Also reported: the try-lock-ticks the three nodes sent
// (try-lock-ticks/op; 10,000 is each tick asked once).
func BenchmarkBurstRedis(b *testing.B) {
	for _, handoff := range []bool{false, true} {
		name := "handoff=off"
		if handoff {
			name = "handoff=on"
		}
		b.Run(name, func(b *testing.B) { benchBurstRedis(b, handoff) })
	}
}

func benchBurstRedis(b *testing.B, handoff bool) {
	url := testenv.RedisURL(b)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	admin := goredis.NewClient(opt)
	b.Cleanup(func() { _ = admin.Close() }) // after the rounds' cleanups
	serverCPU := func() time.Duration { return redisCPU(admin) }
	var tries atomic.Int64
	benchBurst(b, 10_000, handoff, serverCPU, func(b *testing.B, round int) []scheduler.Locker {
		prefix := fmt.Sprintf("bext:bench:%s:%d:", testenv.UniqueName(b), round)
		b.Cleanup(func() { deleteRedisKeys(b, admin, prefix) })
		ls := make([]scheduler.Locker, 3)
		for i := range ls {
			l, err := redis.Open(redis.Options{URL: url, KeyPrefix: prefix, Holder: fmt.Sprintf("n%d", i)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close(context.Background()) })
			ls[i] = countingTicks{l, &tries}
		}
		return ls
	})
	b.ReportMetric(float64(tries.Load())/float64(b.N), "try-lock-ticks/op")
}

// countingTicks is a Redis Locker that counts the try-lock-ticks its
// batches carry: the handoff's aim is to ask each tick once, not once
// per node.
type countingTicks struct {
	*redis.Locker
	n *atomic.Int64
}

func (c countingTicks) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	c.n.Add(int64(len(reqs)))
	return c.Locker.TryLockTicks(ctx, reqs)
}

// BenchmarkBurstPostgres is the same burst on Postgres with 1,000
// schedules (the target there), each node a Locker with the
// default 16 sessions; handoff as for BenchmarkBurstRedis.
func BenchmarkBurstPostgres(b *testing.B) {
	for _, handoff := range []bool{false, true} {
		name := "handoff=off"
		if handoff {
			name = "handoff=on"
		}
		b.Run(name, func(b *testing.B) { benchBurstPostgres(b, handoff) })
	}
}

func benchBurstPostgres(b *testing.B, handoff bool) {
	url := testenv.PGURL(b)
	admin, err := pgx.Connect(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = admin.Close(context.Background()) })
	benchBurst(b, 1_000, handoff, nil, func(b *testing.B, round int) []scheduler.Locker {
		ns := fmt.Sprintf("%s_%d", testenv.UniqueName(b), round)
		b.Cleanup(func() {
			if _, err := admin.Exec(context.Background(), `DELETE FROM bext_lock_fences WHERE namespace = $1`, ns); err != nil {
				b.Logf("cleaning fence rows: %v", err)
			}
		})
		ls := make([]scheduler.Locker, 3)
		for i := range ls {
			l, err := pg.Open(context.Background(), pg.Options{URL: url, Namespace: ns, Holder: fmt.Sprintf("n%d", i)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close(context.Background()) })
			ls[i] = l
		}
		return ls
	})
}

// benchBurst runs n schedules due at one instant on three schedulers, one
// per Locker that open returns (fresh keys every round), and reports the
// lateness of the runs' starts. A tick run twice fails the benchmark;
// skips other than contended (backend errors: a tick whose try-lock-tick
// timed out, run later by the recovery's catch-up) and runs that did not
// succeed (lock_lost: granted after the lease's deadline, expected runtime
// (10s) after it asked) are reported as errors/op, ticks not run within 30s as unrun/op. MaxClockSkew is 5s so
// that a slow start is measured, not skipped as missed.
//
// Also reported, steadier than lateness on a shared machine: the CPU time
// the process (the three nodes) spent from T until every tick ran
// (cpu-ms/op), the same for the backend's server when serverCPU reads it
// (server-cpu-ms/op: the whole server's, so only a private server's is
// the burst's alone), and the pool workers the nodes started (workers/op).
func benchBurst(b *testing.B, n int, handoff bool, serverCPU func() time.Duration, open func(*testing.B, int) []scheduler.Locker) {
	var late []time.Duration
	var errs, unrun int64
	var cpu, srvCPU time.Duration
	workers := 0
	for round := range b.N {
		b.StopTimer()
		lockers := open(b, round)
		// The tick is far enough ahead for every node to have loaded
		// its schedules and created their marks.
		at := time.Now().Truncate(time.Second).Add(3 * time.Second)
		var mu sync.Mutex
		var ran atomic.Int64
		all := make(chan struct{})
		out := &burstOutcomes{}
		stops := make([]func(), len(lockers))
		var nodes []*scheduler.Scheduler
		for i, l := range lockers {
			job := scheduler.JobFunc(func(_ context.Context, t scheduler.Tick) error {
				d := time.Since(t.Time)
				mu.Lock()
				late = append(late, d)
				mu.Unlock()
				if ran.Add(1) == int64(n) {
					close(all)
				}
				return nil
			})
			scheds := make([]scheduler.Schedule, n)
			for k := range scheds {
				scheds[k] = scheduler.Schedule{ID: "burst-" + strconv.Itoa(k), Spec: onceSpec{at},
					Hint: hints.RequireGlobal, ExpectedRuntime: 10 * time.Second, Job: job}
			}
			opts := scheduler.Options{NodeID: fmt.Sprintf("n%d", i), Locker: l,
				Backend: hints.Distributed, MaxClockSkew: 5 * time.Second, Observer: out}
			if handoff {
				nodes := make([]string, len(lockers))
				for k := range nodes {
					nodes[k] = fmt.Sprintf("n%d", k)
				}
				opts.Preferrer = rendezvous.New(opts.NodeID, nodes)
			}
			s, err := scheduler.New(opts, scheds)
			if err != nil {
				b.Fatal(err)
			}
			stops[i] = running(b, s)
			nodes = append(nodes, s)
		}
		var cpuAt, srvAt time.Duration
		atT := make(chan struct{})
		time.AfterFunc(time.Until(at), func() {
			cpuAt = processCPU()
			if serverCPU != nil {
				srvAt = serverCPU()
			}
			close(atT)
		})
		b.StartTimer()
		// A tick skipped as backend_error is owed and tried again when
		// the backend answers: every tick runs in the end, late.
		select {
		case <-all:
		case <-time.After(time.Until(at) + 30*time.Second):
		}
		b.StopTimer()
		<-atT
		cpu += processCPU() - cpuAt
		if serverCPU != nil {
			srvCPU += serverCPU() - srvAt
		}
		for _, stop := range stops {
			stop()
		}
		for _, s := range nodes {
			workers += s.WorkersStarted()
		}
		if got := ran.Load(); got > int64(n) {
			b.Fatalf("round %d: %d runs of %d ticks: a tick ran twice", round, got, n)
		} else {
			unrun += int64(n) - got
		}
		errs += out.bad.Load()
	}
	b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/op")
	if serverCPU != nil {
		b.ReportMetric(float64(srvCPU)/1e6/float64(b.N), "server-cpu-ms/op")
	}
	b.ReportMetric(float64(workers)/float64(b.N), "workers/op")
	b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
	b.ReportMetric(float64(unrun)/float64(b.N), "unrun/op")
	if len(late) == 0 {
		return
	}
	slices.Sort(late)
	q := func(p float64) float64 { return float64(late[int(p*float64(len(late)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-late-ms")
	b.ReportMetric(q(0.99), "p99-late-ms")
	b.ReportMetric(q(1), "max-late-ms")
}

// burstOutcomes counts the skips other than contended (the other nodes'
// share) and the runs that did not succeed.
type burstOutcomes struct {
	scheduler.NopObserver
	bad       atomic.Int64
	contended atomic.Int64
	finished  atomic.Int64
}

func (o *burstOutcomes) TickSkipped(_ string, _ time.Time, why scheduler.SkipReason) {
	if why != scheduler.SkipContended {
		o.bad.Add(1)
	} else {
		o.contended.Add(1)
	}
}

func (o *burstOutcomes) RunFinished(_ string, _ time.Time, r scheduler.RunResult, _ time.Duration, _ bool) {
	o.finished.Add(1)
	if r != scheduler.ResultSuccess {
		o.bad.Add(1) // lock_lost: granted after its lease's deadline
	}
}

func deleteRedisKeys(tb testing.TB, admin *goredis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := admin.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			admin.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		tb.Logf("scanning %s*: %v", prefix, err)
	}
	if len(keys) > 0 {
		admin.Unlink(ctx, keys...)
	}
}

// redisCPU is the CPU time the Redis server has used (INFO cpu,
// used_cpu_sys + used_cpu_user), 0 when it cannot be read.
func redisCPU(admin *goredis.Client) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := admin.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var sec float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sec += f
		}
	}
	return time.Duration(sec * float64(time.Second))
}
