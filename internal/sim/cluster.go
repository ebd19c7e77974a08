package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// cluster carries out one plan: it starts and ends the node lives on the
// fake clock, steps the clock, and waits for quiescence after each step.

type cluster struct {
	plan   *plan
	clock  scheduler.Clock // the fake clock (fake), or the real one (realtime.go)
	mem    backend         // memory, or Redis or Postgres in real time (backend.go)
	grants grantLog
	leases leaseLog
	// seq orders calls against the backend (link.go): a grant whose call
	// returned before another was issued was applied before it.
	seq    atomic.Uint64
	ledger ledger
	// history is ledger.mu's: the run records the nodes wrote.
	history []histRec
	// skipRecs and starts are ledger.mu's: the skip records and run
	// starts the nodes wrote (scheduler.SkipObserver, RunStartObserver).
	skipRecs []skipRec
	starts   []startRec
	// nextRerun is when the harness looks for lost runs next (rerun.go).
	nextRerun time.Time
	// running is ledger.mu's: the runs going on, by run id, for the
	// cluster's side of overlap = "replace" (replaceRuns).
	running map[string]runningRun
	// verdicts is every try-lock-tick answer the backend gave (audit.go).
	verdicts verdictLog
	// skips are ledger.mu's: the ticks each life reported skipped, and why.
	skips map[skipKey]scheduler.SkipReason
	lives []*lifeState // every life started, in start order

	stats stats

	evMu   sync.Mutex
	events []event
	q      quiescer

	opsState                // the operators' actions (cluster_ops.go)
	dupState                // duplicated calls (link_dup.go)
	netStalls  atomic.Int64 // calls sent into a stalled network (realtime.go)
	checkCache              // check.go: the unique grants, while check runs
	// freezeStats counts the freezes carried out (freeze.go).
	freezeStats int
	// fake is clock when it is the fake one; nil in real time, where
	// nominal is the plan's time the harness's loop has reached: the time
	// it waited for, a little before time.Now() when it acts (now).
	fake *fakeclock.Clock
	// lapsed: lapseAll moved the fake clock past every lock, once the
	// cluster stopped (the checks only).
	lapsed  bool
	nominal time.Time
}

// stats count what a seed exercised, so a run can tell how much its
// invariants saw (a liveness check that checked no tick proves nothing).
type stats struct {
	runs, grants, undelivered, checkedTicks, crashes, stops int
	ops                                                     opStats
	dups                                                    int // copies of duplicated calls applied
	netStalls                                               int // calls sent into a stalled network (realtime.go)
	freezes                                                 int
	stopsAt                                                 stopStats // stops.go
}

func (s *stats) add(o stats) {
	s.runs += o.runs
	s.grants += o.grants
	s.undelivered += o.undelivered
	s.checkedTicks += o.checkedTicks
	s.crashes += o.crashes
	s.stops += o.stops
	s.ops.add(o.ops)
	s.dups += o.dups
	s.netStalls += o.netStalls
	s.freezes += o.freezes
	s.stopsAt.add(o.stopsAt)
}

func (s stats) String() string {
	return fmt.Sprintf("%d runs, %d grants (%d replies lost), %d ticks checked for liveness, %d crashes, %d graceful stops (%d in a jitter, %d in a run, %d in a retry's backoff), %d duplicated calls, %d calls sent into a stalled network, %d freezes; %v",
		s.runs, s.grants, s.undelivered, s.checkedTicks, s.crashes, s.stops, s.stopsAt.inJitter, s.stopsAt.inRun, s.stopsAt.inRetry,
		s.dups, s.netStalls, s.freezes, s.ops)
}

// event is one line of the trace printed around a violation.
type event struct {
	at   time.Time
	what string
}

// lifeState is a running (or ended) node life.
type lifeState struct {
	node   string
	life   int
	plan   life
	link   *link
	s      *scheduler.Scheduler
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	// crashed and diedAt are ledger.mu's: a crash and a job's start or a
	// history write are ordered by it.
	crashed bool
	diedAt  time.Time
	killed  chan struct{} // closed at the crash: its jobs die
	stopped bool          // a stop or crash was ordered
	// startedAt and endedAt are when it was started and stopped or
	// crashed (zero: it ran to the end of the run), in true time.
	startedAt, endedAt time.Time
	// scheds is the schedule set it runs (the harness's: a reload
	// replaces it).
	scheds []scheduler.Schedule
	// frz freezes it (freeze.go); nil when its plan has no freeze.
	frz *freezer
}

func (c *cluster) event(at time.Time, format string, a ...any) {
	c.evMu.Lock()
	c.events = append(c.events, event{at, fmt.Sprintf(format, a...)})
	c.evMu.Unlock()
}

// at prints a true time as the trace does: seconds since the start.
func (c *cluster) at(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(c.plan.start).Seconds())
}

// simulate carries out p and returns the cluster for checking. An error is a
// harness failure (a node that never stopped, a cluster never quiescent),
// not a violation.
func simulate(p *plan) (*cluster, error) {
	fake := fakeclock.New(p.start)
	c := &cluster{plan: p, clock: fake, fake: fake, skips: map[skipKey]scheduler.SkipReason{}}
	c.mem = memBackend{memory.New(memory.WithClock(fake.Now))}
	return c.simulate()
}

// simulate carries out c's plan on c's clock and backend.
func (c *cluster) simulate() (*cluster, error) {
	p := c.plan
	next := make([]int, len(p.nodes)) // per node, the next life to start
	cur := make([]*lifeState, len(p.nodes))
	end := p.start.Add(p.span)
	for {
		now := c.now()
		for i, n := range p.nodes {
			if l := cur[i]; l != nil && !l.stopped && !l.plan.to.After(now) && l.plan.to.Before(end) {
				c.endLife(l)
			}
			if l := cur[i]; l != nil && l.stopped && !closed(l.done) {
				continue // the process has not exited yet: no restart
			}
			if k := next[i]; k < len(n.lives) && !n.lives[k].from.After(now) {
				cur[i] = c.startLife(n, k)
				next[i]++
			}
		}
		c.operate(now)
		c.loseState(now)
		if !now.Before(end) {
			break
		}
		// Steps keep to a grid of whole steps from the start, also after
		// a life began or ended between two: a tick is handled at the
		// first grid point after it fires, less than a step late, so a
		// node within max_clock_skew is never late by more than the skew.
		d := min(step-now.Sub(c.plan.start)%step, end.Sub(now))
		for i, n := range p.nodes { // stop at the next start or end exactly
			if l := cur[i]; l != nil && !l.stopped && l.plan.to.After(now) && l.plan.to.Before(end) {
				d = min(d, l.plan.to.Sub(now))
			}
			if k := next[i]; k < len(n.lives) && n.lives[k].from.After(now) {
				d = min(d, n.lives[k].from.Sub(now))
			}
		}
		for _, w := range p.pauses {
			for _, at := range []time.Time{w.from, w.to} {
				if at.After(now) {
					d = min(d, at.Sub(now))
				}
			}
		}
		if at := p.nextLoss(now); !at.IsZero() {
			d = min(d, at.Sub(now))
		}
		d = c.untilNextOp(now, d)
		if err := c.advance(d); err != nil {
			return c, err
		}
	}
	// The end: every node stops gracefully, and the clock moves on while
	// their runs finish within the grace.
	for _, l := range cur {
		if l != nil && !l.stopped {
			l.stopped = true
			c.event(c.clock.Now(), "%s/%d stops (end of the run)", l.node, l.life)
			l.cancel()
		}
	}
	for range 4 * int(shutdownGrace/step) {
		c.handOver(c.clock.Now()) // drops what polls left: the run is over
		if c.allDone() {
			return c, nil
		}
		if err := c.advance(step); err != nil {
			return c, err
		}
	}
	return c, fmt.Errorf("sim: nodes still running %v after the end", 4*shutdownGrace)
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (c *cluster) allDone() bool {
	if c.polling.Load() > 0 || c.dupsInFlight.Load() > 0 {
		return false
	}
	for _, l := range c.lives {
		if !closed(l.done) {
			return false
		}
	}
	return true
}

// advance moves the clock by d and waits until the cluster is quiescent.
func (c *cluster) advance(d time.Duration) error {
	if c.fake == nil {
		return c.wait(d) // real time (realtime.go)
	}
	c.fake.Advance(d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.q.wait(ctx)
}

// startLife starts life k of node n.
func (c *cluster) startLife(n nodePlan, k int) *lifeState {
	lp := n.lives[k]
	l := &lifeState{node: n.id, life: k, plan: lp, done: make(chan struct{}), killed: make(chan struct{}),
		startedAt: c.clock.Now()}
	l.link = newLink(c, n.id, k, n.faults)
	var clock scheduler.Clock = scheduler.OffsetClock(c.clock, lp.offset)
	netClock := c.clock
	if _, ok := c.frozenWithin(n.id, k, c.plan.start, c.plan.start.Add(c.plan.span)); ok {
		l.frz = &freezer{}
		l.link.frz = l.frz
		clock = freezeClock{c.clock, lp.offset, l.frz}
		netClock = freezeClock{c.clock, 0, l.frz} // its resends wait with it
	}
	var scheds []scheduler.Schedule
	for i := range c.plan.scheds {
		sp := &c.plan.scheds[i]
		sc := sp.Schedule
		sc.CronExpr, _ = c.plan.timing(sp.ID, c.clock.Now()) // a reload's, once done
		sc.Job = &job{c: c, sp: sp, lf: l}
		scheds = append(scheds, sc)
	}
	// The jitter draws of a life come from the seed too (one stream per
	// life; the order of draws still follows the goroutines').
	var rmu sync.Mutex
	rr := rand.New(rand.NewPCG(c.plan.seed, uint64(len(c.lives))))
	s, err := scheduler.New(scheduler.Options{
		NodeID: n.id, Tags: n.tags, Locker: l.link.locker(), Backend: hints.Distributed,
		MaxClockSkew: maxSkew, SafetyMargin: safetyMargin, ShutdownGrace: shutdownGrace,
		Clock: clock, NetClock: netClock, Observer: &observer{c: c, lf: l},
		Rand:        func(n int64) int64 { rmu.Lock(); defer rmu.Unlock(); return rr.Int64N(n) },
		ReplaceRuns: c.replaceRuns,
	}, scheds)
	if err != nil {
		panic(fmt.Sprintf("sim: the plan's schedules are invalid: %v", err)) // a bug of plan.go
	}
	l.s, l.scheds = s, scheds
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() {
		defer close(l.done)
		_ = s.Run(ctx) // Run returns nil; ErrRunning cannot happen here
	}()
	c.lives = append(c.lives, l)
	c.event(c.clock.Now(), "%s/%d starts, clock offset %v", n.id, k, lp.offset)
	return l
}

// endLife crashes or stops l, as its plan says.
func (c *cluster) endLife(l *lifeState) {
	l.stopped = true
	now := c.clock.Now()
	l.endedAt = now
	if !l.plan.crash {
		c.event(now, "%s/%d stops gracefully", l.node, l.life)
		l.cancel()
		return
	}
	c.event(now, "%s/%d crashes", l.node, l.life)
	c.ledger.mu.Lock()
	l.crashed, l.diedAt = true, now
	c.ledger.mu.Unlock()
	close(l.killed)
	l.link.kill()
	// What is left of the process winds down at once and can reach
	// nothing: its link is cut, its jobs are dead, its records dropped.
	l.s.EndGrace()
	l.cancel()
}

// trace returns the events from around t (window either side), in order.
func (c *cluster) trace(t time.Time, window time.Duration) string {
	c.evMu.Lock()
	evs := slices.Clone(c.events)
	c.evMu.Unlock()
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, e := range evs {
		if e.at.Before(t.Add(-window)) || e.at.After(t.Add(window)) {
			continue
		}
		fmt.Fprintf(&b, "  %s %s\n", c.at(e.at), e.what)
	}
	return b.String()
}

// operate carries out the operators' actions due at now: a pause is set
// (with its end time when it ends by itself), or lifted by a resume. Each
// returns before the clock moves on, so "after pause returned" is after
// now.
func (c *cluster) operate(now time.Time) {
	ctx := context.Background()
	for _, w := range c.plan.pauses {
		var err error
		switch {
		case w.from.Equal(now):
			pz := locking.Pause{Paused: true, Note: "sim"}
			if w.until {
				pz.Until = w.to
			}
			err = c.mem.SetPause(ctx, w.sched, pz)
			c.event(now, "operator pauses %s (until %v)", w.sched, w.until)
		case w.to.Equal(now) && !w.until:
			err = c.mem.SetPause(ctx, w.sched, locking.Pause{})
			c.event(now, "operator resumes %s", w.sched)
		}
		if err != nil {
			panic(fmt.Sprintf("sim: the memory backend refused a pause: %v", err)) // cannot happen: no faults there
		}
	}
	c.operateOps(now)
}
