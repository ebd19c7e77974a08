package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/rendezvous"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// The handoff (handoff.go) on a one-process cluster: five schedulers on one
// memory lock table, each on its own view of one fake clock, every node
// knowing the same live nodes. The clock moves in steps of handoffStep,
// and after each step the test waits until every node has settled: all
// that is left in flight waits for a handoff timer not yet due.

const (
	handoffTicks = 1000
	handoffDelay = 250 * time.Millisecond
	handoffStep  = 50 * time.Millisecond
	// handoffPeriod is the schedule's: with max_clock_skew = 1s, a period
	// of 2s leaves room for every turn (handoffBound).
	handoffPeriod = 2 * time.Second
)

// counting counts the backend round trips of one node.
type counting struct {
	scheduler.Locker
	tries, releases, renews atomic.Int64
	// gate, when set, blocks every try-lock-tick until it is closed (a
	// node whose lock step is stuck).
	gate chan struct{}
}

func (c *counting) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	if c.gate != nil {
		<-c.gate
	}
	c.tries.Add(1)
	return c.Locker.TryLockTick(ctx, r)
}

func (c *counting) Release(ctx context.Context, h *locking.Handle) error {
	c.releases.Add(1)
	return c.Locker.Release(ctx, h)
}

func (c *counting) Renew(ctx context.Context, h *locking.Handle) error {
	c.renews.Add(1)
	return c.Locker.Renew(ctx, h)
}

// startedRun is one run: its tick, node, and the base clock at its start.
type startedRun struct {
	tick, at time.Time
	node     string
}

type handoffCluster struct {
	base  *fakeclock.Clock
	mu    sync.Mutex
	runs  []startedRun
	locks []*counting
	ids   []string
	recs  []*recorder
}

func (c *handoffCluster) job(id string) scheduler.Job {
	return scheduler.JobFunc(func(_ context.Context, t scheduler.Tick) error {
		c.mu.Lock()
		c.runs = append(c.runs, startedRun{tick: t.Time, at: c.base.Now(), node: id})
		c.mu.Unlock()
		return nil
	})
}

type handoffSetup struct {
	offsets []time.Duration // one per running node
	dead    int             // live in the registry, never running
	stuck   int             // nodes (the first ones) whose try-lock-tick blocks
	noWatch bool            // run without listening to raised marks
	steps   int
	cron    string // default: every handoffPeriod
}

// driveHandoff runs the cluster of setup for setup.steps steps.
func driveHandoff(t *testing.T, setup handoffSetup) *handoffCluster {
	t.Helper()
	base := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(base.Now))
	c := &handoffCluster{base: base}
	var all []string
	for i := range len(setup.offsets) + setup.dead {
		all = append(all, fmt.Sprintf("node-%d", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var nodes, settled []*scheduler.Scheduler
	var gates []chan struct{}
	defer func() {
		for _, g := range gates {
			close(g)
		}
		cancel()
		finished := make(chan struct{})
		go func() {
			wg.Wait()
			close(finished)
		}()
		drain(t, base, finished)
	}()
	for i, off := range setup.offsets {
		id := all[i]
		peer := mem.Peer(id)
		l := &counting{Locker: peer}
		if i < setup.stuck {
			l.gate = make(chan struct{})
			gates = append(gates, l.gate)
		}
		c.locks = append(c.locks, l)
		c.ids = append(c.ids, id)
		rec := newRecorder()
		c.recs = append(c.recs, rec)
		opts := scheduler.Options{
			Observer: rec,
			NodeID:   id, Locker: l, Backend: hints.Distributed,
			MaxClockSkew: time.Second, SafetyMargin: 5 * time.Second,
			Clock:     scheduler.OffsetClock(base, off),
			Preferrer: rendezvous.New(id, all), HandoffDelay: handoffDelay,
			Watcher: peer,
		}
		if setup.noWatch {
			opts.Watcher = noWatcher{}
		}
		cron := setup.cron
		if cron == "" {
			cron = "*/2 * * * * *"
		}
		s, err := scheduler.New(opts, []scheduler.Schedule{{
			ID: "spread", CronExpr: cron, Hint: hints.RequireGlobal,
			ExpectedRuntime: time.Millisecond, Job: c.job(id),
		}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s)
		if i >= setup.stuck {
			settled = append(settled, s)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				t.Errorf("%s: Run: %v", id, err)
			}
		}()
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if !setup.noWatch {
		for _, s := range nodes {
			if err := s.WaitListening(wctx); err != nil {
				t.Fatalf("never listening: %v", err)
			}
		}
	}
	settle := func() {
		for _, s := range settled {
			if err := s.WaitSettled(wctx); err != nil {
				t.Fatalf("cluster never settled: %v; %s at %v", err, s.IdleState(), base.Now())
			}
		}
	}
	settle()
	for range setup.steps {
		base.Advance(handoffStep)
		settle()
	}
	return c
}

// noWatcher hears nothing: waits end by time only.
type noWatcher struct{}

func (noWatcher) WatchTicks(ctx context.Context, _ locking.TickWatch) error {
	<-ctx.Done()
	return nil
}

// checkOnce checks that every tick from the third second to ticks-2 ran
// exactly once (the first and last see only some nodes) and that no tick
// ever ran twice; it returns the runs by tick.
func (c *handoffCluster) checkOnce(t *testing.T, ticks int) map[time.Time]startedRun {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	byTick := map[time.Time]startedRun{}
	for _, r := range c.runs {
		if prev, ok := byTick[r.tick]; ok {
			t.Errorf("tick %v ran twice: on %s and %s", r.tick, prev.node, r.node)
		}
		byTick[r.tick] = r
	}
	missing := 0
	for i := 3; i < ticks-2; i++ {
		if _, ok := byTick[t0.Add(time.Duration(i)*handoffPeriod)]; !ok {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d ticks never ran", missing)
		for i, rec := range c.recs {
			_, skipped, _ := rec.snapshot()
			for _, sk := range skipped {
				if _, ok := byTick[sk.tick]; !ok && sk.tick.After(t0.Add(6*time.Second)) {
					t.Logf("%s skipped %v: %s", c.ids[i], sk.tick, sk.reason)
				}
			}
		}
	}
	return byTick
}

// checked reports whether tick is one every node fired (the first and
// last ones may not be).
func checked(tick time.Time, ticks int) bool {
	return !tick.Before(t0.Add(3*handoffPeriod)) && tick.Before(t0.Add(time.Duration(ticks-2)*handoffPeriod))
}

// roundTrips reports the cluster's try-lock-ticks and releases per run.
func (c *handoffCluster) roundTrips(t *testing.T) (tries, releases float64) {
	t.Helper()
	var tr, rel, ren int64
	for _, l := range c.locks {
		tr += l.tries.Load()
		rel += l.releases.Load()
		ren += l.renews.Load()
	}
	c.mu.Lock()
	n := float64(len(c.runs))
	c.mu.Unlock()
	if ren != 0 {
		t.Errorf("%d renewals of 1ms runs", ren)
	}
	return float64(tr) / n, float64(rel) / n
}

func (c *handoffCluster) shares() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for _, r := range c.runs {
		m[r.node]++
	}
	return m
}

func TestHandoffSpreadsTicksAndCutsRoundTrips(t *testing.T) {
	steps := handoffTicks * int(handoffPeriod/handoffStep)
	c := driveHandoff(t, handoffSetup{offsets: make([]time.Duration, 5), steps: steps})
	byTick := c.checkOnce(t, handoffTicks)
	shares := c.shares()
	limit := handoffTicks * 3 / (2 * 5) // 1.5/N of the ticks
	for id, n := range shares {
		if n > limit {
			t.Errorf("%s ran %d of %d ticks, over 1.5/N = %d", id, n, len(byTick), limit)
		}
	}
	// Every tick ran on its preferred node, at once.
	for tick, r := range byTick {
		if p := rendezvous.Preferred("spread", c.ids, tick); r.node != p {
			t.Errorf("tick %v ran on %s, preferred %s", tick, r.node, p)
		}
		if late := r.at.Sub(tick); late != 0 {
			t.Errorf("tick %v started %v late on its preferred node", tick, late)
		}
	}
	tries, releases := c.roundTrips(t)
	t.Logf("5 nodes, %d runs: shares %v; per tick: %.3f try-lock-ticks + %.3f releases = %.3f round trips",
		len(byTick), shares, tries, releases, tries+releases)
	if tries > 1.05 {
		t.Errorf("%.3f try-lock-ticks per tick, want about 1 (the preferred node's)", tries)
	}
}

// Without hearing decided marks, the handoff still spreads the ticks (the
// preferred node asks first and wins), but every node asks.
func TestHandoffWithoutWatcherSpreadsButAsksEverywhere(t *testing.T) {
	const ticks = 200
	c := driveHandoff(t, handoffSetup{offsets: make([]time.Duration, 5), noWatch: true,
		steps: ticks * int(handoffPeriod/handoffStep)})
	byTick := c.checkOnce(t, ticks)
	for tick, r := range byTick {
		if p := rendezvous.Preferred("spread", c.ids, tick); r.node != p {
			t.Errorf("tick %v ran on %s, preferred %s", tick, r.node, p)
		}
	}
	tries, releases := c.roundTrips(t)
	t.Logf("without watcher: %.3f try-lock-ticks + %.3f releases per tick", tries, releases)
	if tries < 4.9 {
		t.Errorf("%.3f try-lock-ticks per tick without a watcher, want 5 (every node asks)", tries)
	}
}

// A node that is in the registry but dead (never runs: stopped without
// leaving, its announcement not yet expired) costs each tick it is
// preferred for exactly the handoff delay; every tick still runs once.
func TestHandoffDeadPreferredNodeCostsTheDelay(t *testing.T) {
	const ticks = 300
	c := driveHandoff(t, handoffSetup{offsets: make([]time.Duration, 4), dead: 1,
		steps: ticks * int(handoffPeriod/handoffStep)})
	byTick := c.checkOnce(t, ticks)
	all := append(slices.Clone(c.ids), "node-4")
	deadTicks := 0
	for tick, r := range byTick {
		if !checked(tick, ticks) {
			continue
		}
		want := time.Duration(0)
		if rendezvous.Preferred("spread", all, tick) == "node-4" {
			want = handoffDelay
			deadTicks++
		}
		if late := r.at.Sub(tick); late != want {
			t.Errorf("tick %v started %v late, want %v", tick, late, want)
		}
	}
	if deadTicks < ticks/10 {
		t.Errorf("the dead node was preferred for %d ticks only", deadTicks)
	}
	tries, releases := c.roundTrips(t)
	t.Logf("dead node preferred for %d of %d ticks, each started %v late; %.3f try-lock-ticks + %.3f releases per tick",
		deadTicks, len(byTick), handoffDelay, tries, releases)
	if tries > 1.05 {
		t.Errorf("%.3f try-lock-ticks per tick: the runner-up's mark should stop the others", tries)
	}
}

// A node whose lock step is stuck (its try-lock-tick blocks) is like a
// dead one: the ticks it is preferred for start the delay late, once; and
// when it unblocks at the end, its late asks are answered done.
func TestHandoffStuckPreferredNodeCostsTheDelay(t *testing.T) {
	const ticks = 300
	c := driveHandoff(t, handoffSetup{offsets: make([]time.Duration, 5), stuck: 1,
		steps: ticks * int(handoffPeriod/handoffStep)})
	byTick := c.checkOnce(t, ticks)
	stuckTicks := 0
	for tick, r := range byTick {
		if !checked(tick, ticks) {
			continue
		}
		if r.node == "node-0" {
			t.Errorf("the stuck node ran tick %v", tick)
		}
		want := time.Duration(0)
		if rendezvous.Preferred("spread", c.ids, tick) == "node-0" {
			want = handoffDelay
			stuckTicks++
		}
		if late := r.at.Sub(tick); late != want {
			t.Errorf("tick %v started %v late, want %v", tick, late, want)
		}
	}
	if stuckTicks < ticks/10 {
		t.Errorf("the stuck node was preferred for %d ticks only", stuckTicks)
	}
	t.Logf("stuck node preferred for %d of %d ticks, each started %v late", stuckTicks, len(byTick), handoffDelay)
}

// Clocks apart by up to 0.9×max_clock_skew: a preferred node that runs
// behind by more than a turn is overtaken by the next in rank, and one
// ahead by more than the turn's bound ends its wait first; both cost
// spreading, never a double run.
func TestHandoffSkewedClocksRunEachTickOnce(t *testing.T) {
	const ticks = 300
	c := driveHandoff(t, handoffSetup{offsets: clusterOffsets, steps: ticks * int(handoffPeriod/handoffStep)})
	c.checkOnce(t, ticks)
	tries, releases := c.roundTrips(t)
	t.Logf("skewed clocks %v: shares %v; %.3f try-lock-ticks + %.3f releases per tick",
		clusterOffsets, c.shares(), tries, releases)

	// Offsets as chrony leaves them (well within the turns): the spread
	// holds, as the turns count on the backend's clock.
	small := []time.Duration{-100 * time.Millisecond, -50 * time.Millisecond, 0, 50 * time.Millisecond, 100 * time.Millisecond}
	c = driveHandoff(t, handoffSetup{offsets: small, steps: ticks * int(handoffPeriod/handoffStep)})
	byTick := c.checkOnce(t, ticks)
	for id, n := range c.shares() {
		if limit := len(byTick) * 3 / (2 * 5); n > limit {
			t.Errorf("offsets %v: %s ran %d of %d ticks, over 1.5/N = %d", small, id, n, len(byTick), limit)
		}
	}
	t.Logf("skewed clocks %v: shares %v", small, c.shares())
}

// An every-second schedule with max_clock_skew = 1s has no room for a
// handoff (a node ahead may claim T+1 at T, which would consume a T not yet
// asked for): every node asks at once and no tick is lost.
func TestHandoffLeavesNoRoomForTheNextTickToOvertake(t *testing.T) {
	const ticks = 300
	c := driveHandoff(t, handoffSetup{offsets: clusterOffsets, cron: "*/1 * * * * *",
		steps: ticks * int(time.Second/handoffStep)})
	c.mu.Lock()
	count := map[time.Time]int{}
	for _, r := range c.runs {
		count[r.tick]++
	}
	c.mu.Unlock()
	for i := 3; i < ticks-2; i++ {
		if tick := t0.Add(time.Duration(i) * time.Second); count[tick] != 1 {
			t.Errorf("tick %v ran %d times, want 1", tick, count[tick])
		}
	}
}

// The channel of raised marks carries the whole cluster's: a node keeps
// only its own schedules' (others would pile up for good).
func TestHandoffKeepsOnlyItsSchedulesMarks(t *testing.T) {
	base := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(base.Now))
	peer := mem.Peer("a")
	s, err := scheduler.New(scheduler.Options{NodeID: "a", Locker: peer, Backend: hints.Distributed,
		MaxClockSkew: time.Second, Clock: base, Preferrer: rendezvous.New("a", []string{"a", "b"}),
		HandoffDelay: handoffDelay, Watcher: peer},
		[]scheduler.Schedule{{ID: "mine", CronExpr: "0 0 1 1 *", Hint: hints.RequireGlobal, Job: nopJob}})
	if err != nil {
		t.Fatal(err)
	}
	wctx := runUntilEnd(t, base, s)
	if err := s.WaitListening(wctx); err != nil {
		t.Fatal(err)
	}
	other := mem.Peer("b")
	for _, key := range []string{"someone-elses", "mine"} {
		ans, err := other.TryLockTick(context.Background(), locking.TickRequest{
			Key: key, Tick: t0.Add(500 * time.Millisecond), TTL: time.Minute, MaxSkew: time.Second, Window: time.Minute})
		if err != nil || ans.Verdict != locking.TickGranted {
			t.Fatalf("%s: %v, %v", key, ans.Verdict, err)
		}
	}
	// The memory backend tells its watches on the try-lock-tick's own
	// goroutine: both marks were heard when the calls returned.
	if keys := s.HeardKeys(); len(keys) != 1 || keys[0] != "mine" {
		t.Fatalf("heard keys %v, want only this node's schedule", keys)
	}
}

// secondOfTwo ranks this node second of two for every tick: it always
// waits its turn.
type secondOfTwo struct{}

func (secondOfTwo) Rank(string, time.Time) (rank, n int) { return 1, 2 }

// A tick whose turn came asks on its timer's goroutine, and on a backend in
// this process its job runs there too, outside the pool; its end must undo
// what its run counted. It did not while the pool's hook counted a run's
// release and the tick's end uncounted it: the count of runs giving their
// lock back went to -1 for good, and a later tick that fired while a run
// of the schedule released skipped as still_running instead of waiting
// for the lock. The tick's state now does both.
func TestHandoffTurnRunCountsItsReleaseOnce(t *testing.T) {
	base := fakeclock.New(t0)
	var ran atomic.Int32
	s, err := scheduler.New(scheduler.Options{NodeID: "a", Locker: memory.New(memory.WithClock(base.Now)), Backend: hints.Distributed,
		MaxClockSkew: time.Second, Clock: base, Preferrer: secondOfTwo{}, HandoffDelay: handoffDelay, Watcher: noWatcher{}},
		[]scheduler.Schedule{{ID: "m", CronExpr: "* * * * *", Hint: hints.RequireGlobal, ExpectedRuntime: time.Second,
			Job: scheduler.JobFunc(func(context.Context, scheduler.Tick) error { ran.Add(1); return nil })}})
	if err != nil {
		t.Fatal(err)
	}
	wctx := runUntilEnd(t, base, s)
	if err := s.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	base.Advance(time.Minute) // the tick fires, and waits its turn
	if err := s.WaitSettled(wctx); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 0 {
		t.Fatal("the tick ran before its turn")
	}
	base.Advance(handoffDelay)
	if err := s.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1 {
		t.Fatalf("ran %d times once its turn came, want 1", ran.Load())
	}
	if n := s.Releasing("m"); n != 0 {
		t.Errorf("%d runs counted as releasing their lock after the run ended, want 0", n)
	}
}

// runUntilEnd runs s until the test ends, then stops it, moving base on
// while it drains; it returns a context bounded by waitTimeout for the
// test's waits.
func runUntilEnd(t *testing.T, base *fakeclock.Clock, s *scheduler.Scheduler) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); drain(t, base, done) })
	wctx, wcancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(wcancel)
	return wctx
}
