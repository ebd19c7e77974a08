package workpool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// task is the item of the pool in these tests: n tells tasks apart, and
// end marks an end of a run (what a run hands back to defer).
type task struct {
	n   time.Duration
	end bool
}

// newPool is New without the hooks, as the tests set them.
func newPool(run func(task) (task, bool)) *Pool[task] { return New(run, nil, nil) }

// plain is a pool's run that never defers anything.
func plain(run func(task)) func(task) (task, bool) {
	return func(t task) (task, bool) {
		run(t)
		return task{}, false
	}
}

// A task that blocks (a long job) must never keep a queued task waiting:
// n tasks that each wait for all n to have started can only finish if
// the pool runs them all at once.
func TestPoolNeverQueuesATaskBehindABlockedOne(t *testing.T) {
	const n = 200
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var timedOut atomic.Bool
	p := newPool(plain(func(task) {
		started.Done()
		select {
		case <-all:
		case <-ctx.Done():
			timedOut.Store(true)
		}
	}))
	for range n {
		p.Submit(task{})
	}
	p.Close()
	if timedOut.Load() {
		t.Fatalf("not all %d blocking tasks ran at once: a task waited behind a blocked one", n)
	}
	if p.started != n {
		t.Errorf("started %d workers for %d tasks that all block, want %d", p.started, n, n)
	}
}

// close runs what is still queued, then ends every worker, parked ones
// included (goleak in TestMain checks nothing is left).
func TestPoolCloseRunsWhatIsQueued(t *testing.T) {
	var ran atomic.Int64
	gate := make(chan struct{})
	p := newPool(plain(func(t task) {
		if t.n < 0 {
			<-gate // the first task holds its worker until the rest are queued
			return
		}
		ran.Add(1)
	}))
	p.Submit(task{n: -1})
	for range 100 {
		p.Submit(task{})
	}
	close(gate)
	p.Close()
	if n := ran.Load(); n != 100 {
		t.Fatalf("ran %d of 100 queued tasks before close returned", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked != 0 || p.spinning != 0 || p.queue.len() != 0 {
		t.Errorf("after close: parked %d spinning %d queued %d, want 0 0 0", p.parked, p.spinning, p.queue.len())
	}
}

// BenchmarkPoolBurst: 10,000 short tasks handed out 64 at a time, as the
// loop hands out a burst; each takes a shared mutex, as a tick does.
// Reports the workers started for them (fewer: less handoff).
func BenchmarkPoolBurst(b *testing.B) {
	const n = 10_000
	var mu sync.Mutex
	var shared int
	var wg sync.WaitGroup
	var started int
	for range b.N {
		p := newPool(plain(func(task) {
			mu.Lock()
			shared++
			mu.Unlock()
			wg.Done()
		}))
		wg.Add(n)
		const popBatch = 64 // the scheduler loop's
		batch := make([]task, popBatch)
		for i := 0; i < n; i += popBatch {
			p.SubmitAll(batch[:min(popBatch, n-i)])
		}
		wg.Wait()
		started += p.started
		p.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/task")
	b.ReportMetric(float64(started)/float64(b.N), "workers")
}

// The ends of runs (later) wait behind every task that has not started,
// granted and queued alike, and behind the loop's burst (held) and the
// try-lock-ticks on their way (asking); the one that waited MaxDefer goes
// first all the same.
func TestPoolLaterWaitsBehindStartsBounded(t *testing.T) {
	var now time.Duration
	p := newPool(plain(func(task) {}))
	p.now = func() time.Duration { return now }
	mark := func(n time.Duration) task {
		return task{n: n}
	}
	take := func() time.Duration {
		t.Helper()
		if !p.waitingLocked() {
			t.Fatal("no task to take")
		}
		tk, ok := p.takeLocked()
		if !ok {
			t.Fatal("waitingLocked said a task waits; takeLocked took none")
		}
		return tk.n
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.laterLocked(mark(1))
	p.queue.push(mark(2))
	p.granted.push(mark(3))
	p.laterLocked(mark(4))
	for i, want := range []time.Duration{3, 2, 1, 4} {
		if got := take(); got != want {
			t.Fatalf("take %d: task %d, want %d (granted, queued, then the ends of runs in order)", i, got, want)
		}
	}

	p.laterLocked(mark(5))
	p.burst = true
	if p.waitingLocked() {
		t.Fatal("an end of a run is due while the loop hands out a burst")
	}
	p.burst = false
	p.asking.Store(1)
	if p.waitingLocked() {
		t.Fatal("an end of a run is due while try-lock-ticks are on their way")
	}
	p.queue.push(mark(6))
	now += MaxDefer - 1
	if got := take(); got != 6 {
		t.Fatalf("took %d before MaxDefer, want the queued tick 6", got)
	}
	p.queue.push(mark(7))
	now++
	if got := take(); got != 5 {
		t.Fatalf("took %d after MaxDefer, want the end of a run 5 that waited that long", got)
	}
	if got := take(); got != 7 {
		t.Fatalf("took %d, want 7", got)
	}
	p.laterLocked(mark(8))
	p.closed = true
	if got := take(); got != 8 {
		t.Fatalf("took %d once closing, want the end of a run 8 though ticks are asking", got)
	}
}

// An end of a run deferred while every worker is parked (try-lock-ticks
// on their way that never come back) still runs, once it has waited
// MaxDefer; and close runs what is deferred at once.
func TestPoolLaterRunsWhenWorkersPark(t *testing.T) {
	ran := make(chan time.Duration, 2)
	var p *Pool[task]
	p = newPool(func(t task) (task, bool) {
		if !t.end {
			return task{end: true}, true // deferred
		}
		ran <- p.now()
		return task{}, false
	})
	p.asking.Store(1) // never answered
	start := p.now()
	p.Submit(task{})
	select {
	case at := <-ran:
		if waited := at - start; waited < MaxDefer {
			t.Errorf("the end of a run ran after %v while ticks were asking, want it deferred %v", waited, MaxDefer)
		}
	case <-time.After(20 * MaxDefer):
		t.Fatalf("the end of a run did not run within %v while workers parked", 20*MaxDefer)
	}

	p.Submit(task{})
	p.Close()
	select {
	case <-ran:
	default:
		t.Fatal("close returned before the deferred end of a run ran")
	}
}

// A run's end waiting in later is due when nothing is asking; a batched
// tick that starts asking (asking moves outside the pool's lock) makes it
// wait again. A worker that saw it due, then took, must not take from the
// empty queue: it ran a zero task, a panic in the scheduler (seen once under
// -race -count=40, TestLateGrantFreesItsLock's package).
func TestPoolTakesNothingOnceAskingRose(t *testing.T) {
	p := newPool(plain(func(task) {}))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.later.push(laterItem[task]{it: task{end: true}, at: p.now()})
	if !p.waitingLocked() {
		t.Fatal("a run's end with nothing asking is not due")
	}
	p.asking.Add(1) // a tick asks, from another worker
	if tk, ok := p.takeLocked(); ok {
		t.Fatalf("took %+v: nothing may be taken while a tick asks and the run's end waited less than MaxDefer", tk)
	}
	if p.later.len() != 1 {
		t.Fatalf("later holds %d, want the run's end still waiting", p.later.len())
	}
}

// On an injected clock (tests, the simulation) a run's end waits in later
// no longer than MaxDefer of that clock either, not only of the machine's:
// the simulation steps its clock seconds at a time in microseconds, and a
// run's end (its history record with it) waited there 18 of its seconds
// while try-lock-ticks stalled on their way, until the node crashed and the
// grant it ran under was recorded nowhere (internal/sim seed 3947).
func TestPoolLaterBoundedOnTheInjectedClock(t *testing.T) {
	clk := &stepClock{armed: make(chan struct{}, 1)}
	ran := make(chan struct{}, 1)
	p := newPool(func(t task) (task, bool) {
		if !t.end {
			return task{end: true}, true // deferred
		}
		ran <- struct{}{}
		return task{}, false
	})
	p.now = func() time.Duration { return 0 } // the machine's clock stands still
	p.clock, p.clockEpoch = clk, clk.Now()
	p.asking.Store(1) // never answered

	p.mu.Lock()
	p.laterLocked(task{end: true})
	if p.waitingLocked() {
		p.mu.Unlock()
		t.Fatal("an end of a run is due at once while try-lock-ticks are on their way")
	}
	clk.advance(MaxDefer)
	if !p.waitingLocked() {
		p.mu.Unlock()
		t.Fatal("an end of a run that waited MaxDefer on the injected clock is not due")
	}
	p.later.pop()
	p.mu.Unlock()

	p.Submit(task{})
	<-clk.armed // the worker parked, its run's end deferred
	select {
	case <-ran:
		t.Fatal("the end of a run ran at once while ticks were asking")
	default:
	}
	clk.advance(MaxDefer)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the end of a run did not run once it waited MaxDefer on the injected clock, workers parked")
	}
	p.Close()
}

// stepClock is a Clock that moves only when told to (advance), for the
// pool's tests. Only AfterFunc is
// used; armed is told of each arming.
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*stepTimer
	armed  chan struct{}
}

type stepTimer struct {
	c  *stepClock
	at time.Time
	on bool
	f  func()
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &stepTimer{c: c, f: f}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// advance moves the clock by d and calls the functions of the timers due.
func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, t := range c.timers {
		if t.on && !t.at.After(c.now) {
			t.on = false
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

func (t *stepTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.on
	t.on = false
	return was
}

func (t *stepTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	was := t.on
	t.at, t.on = t.c.now.Add(d), true
	t.c.mu.Unlock()
	select {
	case t.c.armed <- struct{}{}:
	default:
	}
	return was
}
