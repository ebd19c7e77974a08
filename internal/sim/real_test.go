//go:build e2elong

package sim

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking/redis"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The simulation in real time against the real Redis and Postgres
// (realtime.go): fewer seeds, each compressed into -realspan, so that the
// Lua and the SQL face the invariants the memory backend faces. Built
// with -tags e2elong only: make cluster-test runs them, make test does
// not. A backend that does not answer fails them (testenv).

var (
	realSeedsFlag    = flag.Int("realseeds", 6, "TestSimRedis, TestSimPostgres: how many seeds to run, from -first (-seed N: only N)")
	realSpanFlag     = flag.Duration("realspan", 40*time.Second, "TestSimRedis, TestSimPostgres: the span a seed's plan is compressed into")
	realParallelFlag = flag.Int("realparallel", 6, "TestSimRedis: seeds run at once (TestSimPostgres: at most -pgparallel)")
	pgParallelFlag   = flag.Int("pgparallel", 3, "TestSimPostgres: seeds run at once (each holds up to a dozen connections)")
)

func TestSimRedis(t *testing.T) {
	t.Parallel() // beside TestSimPostgres: both spend their time waiting
	url := testenv.RedisURL(t)
	runReal(t, "TestSimRedis", *realParallelFlag, func(seed uint64) (*realBackend, error) {
		// A prefix of its own: seeds running at once never meet.
		return newRedisBackend(url, fmt.Sprintf("bext:sim:%d:%d:", seed, time.Now().UnixNano()),
			func(target string) *faultproxy.Proxy { return faultproxy.Start(t, target) })
	})
}

func TestSimPostgres(t *testing.T) {
	t.Parallel()
	url := testenv.PGURL(t)
	runReal(t, "TestSimPostgres", min(*realParallelFlag, *pgParallelFlag), func(seed uint64) (*realBackend, error) {
		// A namespace of its own: keys, fences, marks and advisory lock
		// ids all derive from it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return newPGBackend(ctx, url, fmt.Sprintf("sim_%d_%d", seed, time.Now().UnixNano()%1e12),
			func(target string) *faultproxy.Proxy { return faultproxy.Start(t, target) })
	})
}

// runReal runs the seeds, parallel at once, each on a backend of its own,
// and checks each seed's ledger as TestSim does.
func runReal(t *testing.T, name string, parallel int, open func(seed uint64) (*realBackend, error)) {
	var seeds []uint64
	if *seedFlag >= 0 {
		seeds = append(seeds, uint64(*seedFlag))
	} else {
		for i := range uint64(*realSeedsFlag) {
			seeds = append(seeds, *firstFlag+i)
		}
	}
	began := time.Now()
	var (
		mu    sync.Mutex
		total stats
		bad   []uint64
		known = map[string][]uint64{} // by hole, the seeds that hit it
		walls []string
		wg    sync.WaitGroup
		sem   = make(chan struct{}, max(parallel, 1))
	)
	for _, seed := range seeds {
		// t.Run from goroutines of its own: every seed runs in real time,
		// so they run side by side, not one after the other.
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				b, err := open(seed)
				if err != nil {
					t.Fatalf("the backend: %v", err)
				}
				start := time.Now().Truncate(time.Second).Add(2 * time.Second)
				p := realPlan(newPlan(seed), start, *realSpanFlag)
				wall := time.Now()
				c, err := simulateReal(p, b)
				if err != nil {
					t.Fatalf("the harness failed: %v\nreplay (real time: the same plan, not the same run): %s", err, realReplay(name, seed))
				}
				vs := c.check()
				var fresh, holes []violation
				mu.Lock()
				total.add(c.stats)
				walls = append(walls, fmt.Sprintf("%d:%v", seed, time.Since(wall).Round(100*time.Millisecond)))
				for _, v := range vs {
					if v.known != "" && !*strictFlag {
						known[v.known] = append(known[v.known], seed)
						holes = append(holes, v)
					} else {
						fresh = append(fresh, v)
					}
				}
				mu.Unlock()
				t.Logf("%d nodes, %d schedules, span %v (%v): %v; %d violations, %d of known holes",
					len(p.nodes), len(p.scheds), p.span, time.Since(wall).Round(100*time.Millisecond), c.stats, len(fresh), len(vs)-len(fresh))
				if *verboseFlag {
					t.Logf("plan:\n%s", p)
				}
				if len(holes) > 0 {
					// A run in real time is not replayed exactly: what it
					// found is told here in full.
					t.Logf("known holes (not failing):\n%s", report(c, holes))
				}
				if len(fresh) > 0 {
					t.Errorf("%sreal time: %s", report(c, fresh), realReplay(name, seed))
				}
			})
			if !ok {
				mu.Lock()
				bad = append(bad, seed)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for hole, ss := range known {
		slices.Sort(ss)
		ss = slices.Compact(ss)
		t.Logf("known hole %q (not failing the test; -strict fails on it): seeds %v", hole, ss)
	}
	slices.Sort(bad)
	t.Logf("%d seeds, %d failed %v, in %v (per seed: %s): %v", len(seeds), len(bad), bad,
		time.Since(began).Round(100*time.Millisecond), strings.Join(walls, " "), total)
}

func realReplay(name string, seed uint64) string {
	return fmt.Sprintf("go test -tags e2elong ./internal/sim -run '^%s$' -seed %d -v", name, seed)
}

// TestSimRealSplitBrain checks that the real-time harness sees what it is
// there to see: nodes that do not share their locks (a Redis key prefix
// each) all run every tick of a locked schedule, and the checks must find
// those ticks run twice.
func TestSimRealSplitBrain(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	prefix := fmt.Sprintf("bext:sim:split:%d:", time.Now().UnixNano())
	b, err := newRedisBackend(url, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.open = func(node string, _ int) (realNode, error) {
		l, err := redis.Open(redis.Options{URL: url, KeyPrefix: prefix + node + ":"})
		if err != nil {
			return nil, err
		}
		return &redisNode{Locker: l}, nil
	}
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	p := &plan{seed: 1, start: start, span: 6 * time.Second, hashKey: 1}
	sp := schedPlan{period: time.Second, maxRun: 100 * time.Millisecond}
	sp.ID, sp.CronExpr, sp.Hint = "s0", "* * * * * *", hints.RequireGlobal
	sp.Overlap, sp.ExpectedRuntime = scheduler.OverlapSkip, time.Second
	p.scheds = []schedPlan{sp}
	for i := range 3 {
		p.nodes = append(p.nodes, nodePlan{id: fmt.Sprintf("node-%d", i),
			lives: []life{{from: start, to: start.Add(p.span)}}})
	}
	c, err := simulateReal(p, b)
	if err != nil {
		t.Fatalf("the harness failed: %v", err)
	}
	twice := 0
	for _, v := range c.check() {
		if v.inv == invTwice {
			twice++
		}
	}
	if twice == 0 {
		t.Fatalf("three nodes on separate locks ran %v, and no tick was found run twice", c.stats)
	}
	t.Logf("%d ticks found run twice (%v)", twice, c.stats)
}
