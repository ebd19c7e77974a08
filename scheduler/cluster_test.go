package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// A one-process cluster: five schedulers share one memory lock table, each
// on its own view of one fake clock, offset by up to ±0.9×MaxClockSkew. The
// test steps the clock a second at a time and, after each step, waits
// until every node has handled that instant (WaitIdle), so 10,000 ticks
// take seconds and nothing sleeps.

const clusterTicks = 10000

var clusterOffsets = []time.Duration{-900 * time.Millisecond, -450 * time.Millisecond, 0,
	450 * time.Millisecond, 900 * time.Millisecond}

type runRecord struct {
	tick  time.Time
	node  string
	fence int64
}

type cluster struct {
	mu   sync.Mutex
	runs []runRecord
	recs []*recorder
}

func (c *cluster) Run(_ context.Context, t scheduler.Tick) error {
	c.mu.Lock()
	c.runs = append(c.runs, runRecord{t.Time, t.NodeID, t.FencingToken})
	c.mu.Unlock()
	return nil
}

// runCluster drives an every-second schedule with hint on five nodes for
// clusterTicks one-second steps; wrap, when set, wraps each node's lock.
func runCluster(t *testing.T, hint hints.Hint, wrap func(scheduler.Locker) scheduler.Locker) *cluster {
	t.Helper()
	return driveCluster(t, hint, "*/1 * * * * *", clusterTicks, time.Second, wrap)
}

// driveCluster drives schedule expr with hint on five nodes for steps
// steps of step each.
func driveCluster(t *testing.T, hint hints.Hint, expr string, steps int, step time.Duration,
	wrap func(scheduler.Locker) scheduler.Locker) *cluster {
	t.Helper()
	return driveClusterOffsets(t, hint, expr, steps, step, clusterOffsets, wrap)
}

// driveClusterOffsets is driveCluster with the nodes' clock offsets.
func driveClusterOffsets(t *testing.T, hint hints.Hint, expr string, steps int, step time.Duration,
	offsets []time.Duration, wrap func(scheduler.Locker) scheduler.Locker) *cluster {
	t.Helper()
	base := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(base.Now))
	c := &cluster{}
	var nodes []*scheduler.Scheduler
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		finished := make(chan struct{})
		go func() {
			wg.Wait()
			close(finished)
		}()
		drain(t, base, finished)
	}()
	for i, off := range offsets {
		id := fmt.Sprintf("node-%d", i)
		var l scheduler.Locker = mem.Peer(id)
		if wrap != nil {
			l = wrap(l)
		}
		rec := newRecorder()
		c.recs = append(c.recs, rec)
		s, err := scheduler.New(scheduler.Options{
			NodeID: id, Locker: l, Backend: hints.Distributed,
			MaxClockSkew: time.Second, SafetyMargin: 5 * time.Second,
			Clock: scheduler.OffsetClock(base, off), Observer: rec,
		}, []scheduler.Schedule{{
			ID: "cluster", CronExpr: expr, Hint: hint,
			ExpectedRuntime: time.Millisecond, Job: c,
		}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				t.Errorf("%s: Run: %v", id, err)
			}
		}()
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	idle := func() {
		for _, s := range nodes {
			if err := s.WaitIdle(wctx); err != nil {
				var all []string
				for _, n := range nodes {
					all = append(all, n.IdleState())
				}
				t.Fatalf("cluster never became idle: %v; %s; all nodes: %q; %d timers armed at %v", err, s.IdleState(), all, base.Armed(), base.Now())
			}
		}
	}
	idle()
	for range steps {
		base.Advance(step)
		idle()
	}
	return c
}

// checkedTicks are the ticks every node has fired: the first and last
// seconds see only some nodes (their clocks start and stop apart).
func checkedTicks(yield func(time.Time) bool) {
	for i := 2; i < clusterTicks-1; i++ {
		if !yield(t0.Add(time.Duration(i) * time.Second)) {
			return
		}
	}
}

func TestClusterRequireGlobalRunsEveryTickOnce(t *testing.T) {
	c := runCluster(t, hints.RequireGlobal, nil)
	count := map[time.Time]int{}
	for _, r := range c.runs {
		count[r.tick]++
		if count[r.tick] > 1 {
			t.Errorf("tick %v ran %d times (latest on %s)", r.tick, count[r.tick], r.node)
		}
	}
	missing := 0
	for tick := range checkedTicks {
		if count[tick] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("tick %v never ran", tick)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d ticks never ran", missing, clusterTicks-3)
	}
	// Fencing tokens never go backwards from one tick to the next.
	byTick := map[time.Time]runRecord{}
	for _, r := range c.runs {
		byTick[r.tick] = r
	}
	var prev runRecord
	for tick := range checkedTicks {
		r := byTick[tick]
		if r.fence < prev.fence {
			t.Errorf("tick %v ran on %s with fence %d < %d of the tick before", tick, r.node, r.fence, prev.fence)
		}
		prev = r
	}
	// Every node fired every tick; the ones that did not run it were
	// contended, never anything else.
	for i, rec := range c.recs {
		fired, skipped, runs := rec.snapshot()
		if len(fired) < clusterTicks-1 || len(skipped)+len(runs) != len(fired) {
			t.Errorf("node-%d: %d fired, %d skipped, %d ran", i, len(fired), len(skipped), len(runs))
		}
		for _, s := range skipped {
			if s.reason != scheduler.SkipContended {
				t.Fatalf("node-%d skipped %v as %q, want contended", i, s.tick, s.reason)
			}
		}
		t.Logf("node-%d (offset %v): ran %d, contended %d", i, clusterOffsets[i], len(runs), len(skipped))
	}
}

func TestClusterNodeLocalRunsEveryTickOnEveryNode(t *testing.T) {
	c := runCluster(t, hints.NodeLocal, nil)
	count := map[runRecord]int{}
	for _, r := range c.runs {
		if r.fence != 0 {
			t.Fatalf("node_local run carries fence %d", r.fence)
		}
		count[r]++
	}
	for tick := range checkedTicks {
		for i := range clusterOffsets {
			if n := count[runRecord{tick: tick, node: fmt.Sprintf("node-%d", i)}]; n != 1 {
				t.Fatalf("node-%d ran tick %v %d times, want 1", i, tick, n)
			}
		}
	}
}

func TestClusterBrokenBackendRunsNothing(t *testing.T) {
	c := runCluster(t, hints.RequireGlobal, func(l scheduler.Locker) scheduler.Locker {
		return &faulty{inner: l, tryErr: errBackendDown}
	})
	if len(c.runs) != 0 {
		t.Fatalf("%d runs with a broken backend, want 0", len(c.runs))
	}
	for i, rec := range c.recs {
		fired, skipped, runs := rec.snapshot()
		if len(fired) < clusterTicks-1 || len(skipped) != len(fired) || len(runs) != 0 {
			t.Errorf("node-%d: %d fired, %d skipped, %d ran; want every fired tick skipped", i, len(fired), len(skipped), len(runs))
		}
		for _, s := range skipped {
			if s.reason != scheduler.SkipBackendError {
				t.Fatalf("node-%d skipped %v as %q, want backend_error", i, s.tick, s.reason)
			}
		}
	}
}

// Ticks 3s apart, five nodes whose clocks run behind the backend's by up
// to 5×max_clock_skew, stepped by 250ms: the node on time wins nearly
// every tick and the others fire the same tick up to 5s later, long after
// its lock was released. The tick mark answers them "done": every tick
// runs exactly once, and none is lost.
func TestClusterMarkStopsNodesFarBehind(t *testing.T) {
	const ticks = 600
	offsets := []time.Duration{0, -1250 * time.Millisecond, -2500 * time.Millisecond,
		-3750 * time.Millisecond, -5 * time.Second}
	c := driveClusterOffsets(t, hints.RequireGlobal, "*/3 * * * * *", ticks*12, 250*time.Millisecond, offsets, nil)
	count := map[time.Time]int{}
	winners := map[string]int{}
	for _, r := range c.runs {
		count[r.tick]++
		winners[r.node]++
	}
	for i := 2; i < ticks-2; i++ {
		tick := t0.Add(time.Duration(3*i) * time.Second)
		if count[tick] != 1 {
			t.Errorf("tick %v ran %d times, want 1", tick, count[tick])
		}
	}
	for tick, n := range count {
		if n > 1 {
			t.Errorf("tick %v ran %d times", tick, n)
		}
	}
	t.Logf("runs per node: %v", winners)
}

// One node's clock runs 3×max_clock_skew ahead: its try-lock-ticks are
// refused, and the others still run every tick once.
func TestClusterNodeAheadIsRefusedOthersRunEveryTick(t *testing.T) {
	const ticks = 300
	offsets := []time.Duration{0, -500 * time.Millisecond, 3 * time.Second}
	c := driveClusterOffsets(t, hints.RequireGlobal, "*/1 * * * * *", ticks*4, 250*time.Millisecond, offsets, nil)
	count := map[time.Time]int{}
	for _, r := range c.runs {
		count[r.tick]++
		if r.node == "node-2" {
			t.Fatalf("the node 3s ahead ran tick %v", r.tick)
		}
	}
	for i := 5; i < ticks-5; i++ {
		if tick := t0.Add(time.Duration(i) * time.Second); count[tick] != 1 {
			t.Errorf("tick %v ran %d times, want 1", tick, count[tick])
		}
	}
	_, skipped, _ := c.recs[2].snapshot()
	errs := 0
	for _, s := range skipped {
		if s.reason == scheduler.SkipBackendError {
			errs++
		}
	}
	if errs < ticks-10 {
		t.Errorf("the node ahead reported %d refused ticks, want about %d", errs, ticks)
	}
}
