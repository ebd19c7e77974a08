// Package workpool is the scheduler's worker pool: the goroutines that
// carry ticks, a FIFO of work that never lets one item wait for another
// that blocks, and a third queue for work that may wait behind a burst
// (the ends of runs) for at most MaxDefer. It knows nothing of ticks: the
// scheduler gives it a function that does one item and may hand back
// another to defer (docs/DESIGN.md, "The tick path").
package workpool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Why a pool, and not a goroutine per item.
//
// Ticks never wait for each other: a slow lock backend or a long job must
// not delay another schedule. Starting a fresh goroutine for each tick was
// the largest cost of a burst, though (10,000 schedules due in the same
// second): creating it, growing its stack, and the Go scheduler running
// the newest goroutine first while the loop that hands out the rest waits
// behind them. So the loop queues ticks, first in first out, and workers
// take them; a worker that finished a tick takes the next one on the stack
// it already grew. No tick waits for another job to end (see pool).
//
// Between bursts at most maxIdleWorkers stay parked (a few KiB of stack
// each); the others end. Shutdown ends them all once the queue is empty.

// maxIdleWorkers bounds the workers kept parked between ticks. The ones
// beyond it end, and are started afresh next time they are needed, which
// costs what a goroutine per tick used to cost.
const maxIdleWorkers = 64

// Pool is the FIFO queue of items and the workers that drain it.
//
// A worker that takes a item may block in it for as long as the job runs,
// so whenever the queue holds a item, some worker that is not in a item
// must be on its way to the queue: a "spinning" worker, one that is awake
// (or woken, or just started) and will look at the queue before it does
// anything else. submit and every take keep that so, waking a parked
// worker or starting one only when no worker spins. (The Go scheduler keeps
// its spinning threads the same way.) Ticks that block get a worker each,
// as they got a goroutine each before; a burst of ticks that do not block
// is carried by far fewer workers than ticks, each taking the next item as
// it finishes one. Not by one or two, though: a worker parked on a busy
// mutex counts as blocked, so BenchmarkSameSecond10k sees 30 to 1,300
// workers for its 10,000 ticks.
type Pool[T any] struct {
	// run does an item; what it returns (the end of a run whose job
	// returned in it) is queued in later.
	run func(T) (later T, ok bool)
	// returned, when set, is told of each end of a run that run returned,
	// before it is queued in later; false: the end may not wait, and the
	// worker does it at once (Scheduler.jobReturned).
	returned func(later T) (mayDefer bool)
	now      func() time.Duration // monoNow; tests step it
	// clock, when set (setClock), is the scheduler's clock, one injected
	// in place of the machine's: an end of a run is also due once it has
	// waited MaxDefer by it. MaxDefer bounds a matter of this process's
	// CPU, so the machine's clock (now) bounds it; but every other wait
	// of the scheduler is on its clock, and one that runs faster than the
	// machine's (the simulation steps seconds in microseconds, while its
	// harness waits only for the goroutines to block) saw a run's end, its
	// history record and its release, wait seconds of it for try-lock-ticks
	// stalled on their way, and a node that died meanwhile took the record
	// with it (internal/sim seed 3947). Whichever clock passes MaxDefer
	// first makes it due. (clockTimer is its laterTimer.)
	clock      Clock
	clockEpoch time.Time
	clockTimer Timer

	mu    sync.Mutex
	cond  sync.Cond // parked workers wait here
	queue fifo[T]
	// granted are ticks whose batched try-lock-tick was answered (the scheduler's batched try-lock-ticks),
	// taken before any of queue, in order: their lease is running, while
	// a tick of queue has not asked yet. FIFO between the two had the
	// answered ticks of a 10,000-tick burst wait behind every request not
	// yet sent, so their jobs started only once all of them had asked.
	granted fifo[T]
	// later are the ends of runs whose jobs have returned (step 7's
	// release, step 8's report: Scheduler.afterRun), taken after granted
	// and queue, unless the oldest has waited MaxDefer. A tick's lateness
	// is read when its job starts, and on two cores the work done after a
	// job started competed with the ticks of the same burst not yet
	// started: done first, it made the last ones later by its whole cost.
	// Deferred, it is done once the burst has started (and the loop has
	// handed out all of it: held), or after MaxDefer under a load that
	// never drains. A release a few milliseconds late is harmless (the
	// mark, not the lock, keeps T from running twice: DESIGN.md step 7),
	// and bounded so that the schedule's next tick finds its lock free;
	// an end that could not wait MaxDefer without holding the lock into
	// the next tick is not deferred at all (returned).
	later fifo[laterItem[T]]
	// burst: the loop is handing out a burst (HandingOut), so more ticks come
	// that have not started: later waits for them even when nothing else
	// waits (until MaxDefer). asking counts the ticks whose batched
	// try-lock-tick is queued or on its way (the scheduler's batched try-lock-ticks): they come back as
	// granted.
	burst  bool
	asking atomic.Int64
	// laterTimer gets a worker spinning when the head of later has waited
	// MaxDefer while every worker parked (armed: laterArmed).
	laterTimer *time.Timer
	laterArmed bool
	spinning   int  // workers on their way to the queue (see above)
	idle       int  // parked workers not yet woken
	parked     int  // parked workers, woken or not
	closed     bool // no more items: workers end once the queue is empty
	started    int  // workers started so far (the benchmarks report it)
	wg         sync.WaitGroup
}

// MaxDefer bounds how long a item of pool.later waits while other items
// keep coming: a tenth of the shortest period of a schedule (a second),
// and longer than a burst of 10,000 ticks takes to start on two cores.
const MaxDefer = 100 * time.Millisecond

// laterItem is an item of pool.later and when it was queued (monoNow):
// small, as 10,000 of them queue in a burst.
type laterItem[T any] struct {
	it  T
	at  time.Duration
	atc time.Duration // clockNow, when the pool has a clock
}

// monoEpoch and monoNow read the monotonic clock for pool.later's bound:
// how long a item has waited for a worker is a matter of this process's
// CPU, not of any schedule, so it is the real clock whatever the
// scheduler's (time.Since of a time with a monotonic reading reads
// nothing else).
var monoEpoch = time.Now()

func monoNow() time.Duration { return time.Since(monoEpoch) }

// New returns a pool whose workers do each item with run. What run
// returns when ok (the end of a run whose job returned in it) is queued
// in later; returned, when not nil, is told of it first, and answers
// false when it may not wait: the worker then does it at once. clock, when
// not nil, is the scheduler's injected clock (see pool.clock).
func New[T any](run func(T) (later T, ok bool), returned func(later T) (mayDefer bool), clock Clock) *Pool[T] {
	p := &Pool[T]{run: run, returned: returned, now: monoNow}
	if clock != nil {
		p.clock, p.clockEpoch = clock, clock.Now()
	}
	p.cond.L = &p.mu
	return p
}

// Submit queues t.
func (p *Pool[T]) Submit(t T) {
	p.mu.Lock()
	p.queue.push(t)
	if p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// SubmitAll queues ts, in order, under one lock: the loop hands out the
// ticks of a wake together, and a lock per tick had the workers that take
// them queue behind the loop.
func (p *Pool[T]) SubmitAll(ts []T) {
	if len(ts) == 0 {
		return
	}
	p.mu.Lock()
	for _, t := range ts {
		p.queue.push(t)
	}
	if p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// SubmitFront queues item(x) for each x of xs, in order, ahead of every
// item Submit and SubmitAll queued (see pool.granted), and counts them no
// longer asking (AddAsking). (Items made here, not by the caller: a slice
// of them per batch was a tenth of a burst's allocations.)
func SubmitFront[T, X any](p *Pool[T], xs []X, item func(X) T) {
	if len(xs) == 0 {
		return
	}
	p.mu.Lock()
	for _, x := range xs {
		p.granted.push(item(x))
	}
	p.asking.Add(-int64(len(xs)))
	if p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// AddAsking counts n more (or, negative, fewer) items on their way to
// SubmitFront: an end of a run waits for them (see pool.burst).
func (p *Pool[T]) AddAsking(n int64) { p.asking.Add(n) }

// HandingOut tells the pool whether the loop is handing out a burst (see
// pool.burst). Released, it gets a worker spinning for the items of later
// that waited for it.
func (p *Pool[T]) HandingOut(on bool) {
	p.mu.Lock()
	p.burst = on
	if !on && p.waitingLocked() && p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// laterLocked queues t, an end of a run, in later (see pool.later). The worker that ran
// the item t came from calls it, on its way back to the queue: it counts
// as the spinning worker that will take t or what goes before it, so no
// other worker is woken for t.
func (p *Pool[T]) laterLocked(t T) {
	p.later.push(laterItem[T]{it: t, at: p.now(), atc: p.clockNow()})
}

// waitingLocked reports whether a item waits that may be taken now.
func (p *Pool[T]) waitingLocked() bool {
	return p.granted.len() > 0 || p.queue.len() > 0 || p.laterDueLocked(false)
}

// laterDueLocked reports whether the head of later is to be taken now:
// it waited MaxDefer, or nothing goes before it (busy: another item
// waits).
func (p *Pool[T]) laterDueLocked(busy bool) bool {
	if p.later.len() == 0 {
		return false
	}
	if !busy && (!p.burst && p.asking.Load() == 0 || p.closed) {
		return true
	}
	head := p.later.front()
	return p.now()-head.at >= MaxDefer || p.clock != nil && p.clockNow()-head.atc >= MaxDefer
}

// takeLocked takes the next item, if one may be taken now. It decides on
// its own reading, not on an earlier waitingLocked's: asking moves outside
// the lock (a batched tick asks from any worker), so a head of later that
// was due when nothing was asking may no longer be, and a worker that then
// took from an empty queue ran a zero item (a panic in the scheduler's runTask).
func (p *Pool[T]) takeLocked() (T, bool) {
	busy := p.granted.len() > 0 || p.queue.len() > 0
	switch {
	case p.laterDueLocked(busy):
		return p.later.pop().it, true
	case p.granted.len() > 0:
		return p.granted.pop(), true
	case p.queue.len() > 0:
		return p.queue.pop(), true
	}
	var zero T
	return zero, false
}

// spinLocked gets one more worker spinning: a parked one, or a new one.
func (p *Pool[T]) spinLocked() {
	p.spinning++
	if p.idle > 0 {
		p.idle--
		p.cond.Signal()
		return
	}
	p.started++
	p.wg.Add(1)
	go p.worker()
}

// worker starts spinning (whoever started it counted it).
func (p *Pool[T]) worker() {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		if t, ok := p.takeLocked(); ok {
			// This worker may now block in t: hand the spinning on.
			p.spinning--
			if p.waitingLocked() && p.spinning == 0 {
				p.spinLocked()
			}
			p.mu.Unlock()
			later, ok := p.run(t)
			if ok && p.returned != nil && !p.returned(later) {
				later, ok = p.run(later)
			}
			p.mu.Lock()
			if ok {
				p.laterLocked(later)
			}
			p.spinning++
			continue
		}
		p.spinning--
		if p.closed || p.parked >= maxIdleWorkers {
			p.mu.Unlock()
			return
		}
		if p.later.len() > 0 && p.spinning == 0 {
			p.armLaterLocked()
		}
		p.idle++
		p.parked++
		p.cond.Wait() // whoever wakes it counts it spinning
		p.parked--
	}
}

// armLaterLocked arms the timer that keeps the bound of later (MaxDefer)
// while no worker is awake to check it, and the injected clock's (see
// pool.clock).
func (p *Pool[T]) armLaterLocked() {
	if p.laterArmed {
		return
	}
	p.laterArmed = true
	d := max(MaxDefer-(p.now()-p.later.front().at), 0)
	if p.laterTimer == nil {
		p.laterTimer = time.AfterFunc(d, p.laterDue)
	} else {
		p.laterTimer.Reset(d)
	}
	if p.clock == nil {
		return
	}
	d = max(MaxDefer-(p.clockNow()-p.later.front().atc), 0)
	if p.clockTimer == nil {
		p.clockTimer = p.clock.AfterFunc(d, p.laterDue)
	} else {
		p.clockTimer.Reset(d)
	}
}

// laterDue runs when the head of later may have waited MaxDefer.
func (p *Pool[T]) laterDue() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.laterArmed = false
	if p.closed || p.spinning > 0 || p.later.len() == 0 {
		return // a worker is on its way, or nothing is left to do
	}
	if p.waitingLocked() {
		p.spinLocked()
		return
	}
	p.armLaterLocked() // not yet due: a reading of the clock early
}

// Close ends the workers once the queue is drained and waits for them. No
// item may be submitted after it is called.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	p.closed = true
	if p.laterTimer != nil {
		p.laterTimer.Stop()
	}
	if p.clockTimer != nil {
		p.clockTimer.Stop()
	}
	p.spinning += p.idle
	p.idle = 0
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

// clockNow reads the injected clock (pool.clock) as a duration; zero
// without one.
func (p *Pool[T]) clockNow() time.Duration {
	if p.clock == nil {
		return 0
	}
	return p.clock.Now().Sub(p.clockEpoch)
}

// Started is how many workers the pool has started (the benchmarks report
// it next to the number of ticks).
func (p *Pool[T]) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Clock is what the pool needs of the scheduler's injected clock.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer of Clock.
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// HoldLater makes the pool defer the ends of runs as a burst that never
// drains would: an item counts as on its way and the bound MaxDefer never
// passes, until the returned func is called. For tests on a fake clock,
// where the real milliseconds of that bound have no measure.
func (p *Pool[T]) HoldLater() (undo func()) {
	p.mu.Lock()
	frozen, now := p.now(), p.now
	p.now = func() time.Duration { return frozen }
	p.asking.Add(1)
	p.mu.Unlock()
	return sync.OnceFunc(func() {
		p.mu.Lock()
		p.now = now
		p.asking.Add(-1)
		if p.waitingLocked() && p.spinning == 0 && !p.closed {
			p.spinLocked()
		}
		p.mu.Unlock()
	})
}
