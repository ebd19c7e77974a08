package scheduler

import (
	"sync"
	"sync/atomic"
	"time"
)

// The goroutines that carry ticks.
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

// task is one unit of work for a worker: a fired tick, one whose
// batched try-lock-tick was answered (call; batch.go), or the end of a
// run whose job has returned (ran; deferred, see pool.later).
type task struct {
	f    fired
	call *tickCall
	ran  *releaseCall
	// turn: f waited for its turn (handoff.go) and now asks.
	turn taskTurn
}

type taskTurn uint8

const (
	turnNone taskTurn = iota
	turnAsk
)

// pool is the FIFO queue of tasks and the workers that drain it.
//
// A worker that takes a task may block in it for as long as the job runs,
// so whenever the queue holds a task, some worker that is not in a task
// must be on its way to the queue: a "spinning" worker, one that is awake
// (or woken, or just started) and will look at the queue before it does
// anything else. submit and every take keep that so, waking a parked
// worker or starting one only when no worker spins. (The Go scheduler keeps
// its spinning threads the same way.) Ticks that block get a worker each,
// as they got a goroutine each before; a burst of ticks that do not block
// is carried by far fewer workers than ticks, each taking the next task as
// it finishes one. Not by one or two, though: a worker parked on a busy
// mutex counts as blocked, so BenchmarkSameSecond10k sees 30 to 1,300
// workers for its 10,000 ticks.
type pool struct {
	// run does a task; what it returns (the end of a run whose job
	// returned in it) is queued in later.
	run func(task) (later task, ok bool)
	// returned, when set, is told of each end of a run that run returned,
	// before it is queued in later; false: the end may not wait, and the
	// worker does it at once (Scheduler.jobReturned).
	returned func(later task) (mayDefer bool)
	now      func() time.Duration // monoNow; tests step it
	// clock, when set (setClock), is the scheduler's clock, one injected
	// in place of the machine's: an end of a run is also due once it has
	// waited maxDefer by it. maxDefer bounds a matter of this process's
	// CPU, so the machine's clock (now) bounds it; but every other wait
	// of the scheduler is on its clock, and one that runs faster than the
	// machine's (the simulation steps seconds in microseconds, while its
	// harness waits only for the goroutines to block) saw a run's end, its
	// history record and its release, wait seconds of it for try-lock-ticks
	// stalled on their way, and a node that died meanwhile took the record
	// with it (internal/sim seed 3947). Whichever clock passes maxDefer
	// first makes it due. (clockTimer is its laterTimer.)
	clock      Clock
	clockEpoch time.Time
	clockTimer Timer

	mu    sync.Mutex
	cond  sync.Cond // parked workers wait here
	queue fifo[task]
	// granted are ticks whose batched try-lock-tick was answered (batch.go),
	// taken before any of queue, in order: their lease is running, while
	// a tick of queue has not asked yet. FIFO between the two had the
	// answered ticks of a 10,000-tick burst wait behind every request not
	// yet sent, so their jobs started only once all of them had asked.
	granted fifo[task]
	// later are the ends of runs whose jobs have returned (step 7's
	// release, step 8's report: Scheduler.afterRun), taken after granted
	// and queue, unless the oldest has waited maxDefer. A tick's lateness
	// is read when its job starts, and on two cores the work done after a
	// job started competed with the ticks of the same burst not yet
	// started: done first, it made the last ones later by its whole cost.
	// Deferred, it is done once the burst has started (and the loop has
	// handed out all of it: held), or after maxDefer under a load that
	// never drains. A release a few milliseconds late is harmless (the
	// mark, not the lock, keeps T from running twice: DESIGN.md step 7),
	// and bounded so that the schedule's next tick finds its lock free;
	// an end that could not wait maxDefer without holding the lock into
	// the next tick is not deferred at all (returned).
	later fifo[laterTask]
	// burst: the loop is handing out a burst (handingOut), so more ticks come
	// that have not started: later waits for them even when nothing else
	// waits (until maxDefer). asking counts the ticks whose batched
	// try-lock-tick is queued or on its way (batch.go): they come back as
	// granted.
	burst  bool
	asking atomic.Int64
	// laterTimer gets a worker spinning when the head of later has waited
	// maxDefer while every worker parked (armed: laterArmed).
	laterTimer *time.Timer
	laterArmed bool
	spinning   int  // workers on their way to the queue (see above)
	idle       int  // parked workers not yet woken
	parked     int  // parked workers, woken or not
	closed     bool // no more tasks: workers end once the queue is empty
	started    int  // workers started so far (the benchmarks report it)
	wg         sync.WaitGroup
}

// maxDefer bounds how long a task of pool.later waits while other tasks
// keep coming: a tenth of the shortest period of a schedule (a second),
// and longer than a burst of 10,000 ticks takes to start on two cores.
const maxDefer = 100 * time.Millisecond

// laterTask is a task of pool.later (task{ran: ran}) and when it was
// queued (monoNow): small, as 10,000 of them queue in a burst.
type laterTask struct {
	ran *releaseCall
	at  time.Duration
	atc time.Duration // clockNow, when the pool has a clock
}

// monoEpoch and monoNow read the monotonic clock for pool.later's bound:
// how long a task has waited for a worker is a matter of this process's
// CPU, not of any schedule, so it is the real clock whatever the
// scheduler's (time.Since of a time with a monotonic reading reads
// nothing else).
var monoEpoch = time.Now()

func monoNow() time.Duration { return time.Since(monoEpoch) }

func newPool(run func(task) (task, bool)) *pool {
	p := &pool{run: run, now: monoNow}
	p.cond.L = &p.mu
	return p
}

// submit queues t.
func (p *pool) submit(t task) {
	p.mu.Lock()
	p.queue.push(t)
	if p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// submitAll queues ts, in order, under one lock: the loop hands out the
// ticks of a wake together, and a lock per tick had the workers that take
// them queue behind the loop.
func (p *pool) submitAll(ts []task) {
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

// submitAnswered queues a task for each answered call, in order, ahead
// of every task submit and submitAll queued (see pool.granted); they no
// longer count as asking. (Tasks made here, not by the caller: a slice of
// them per batch was a tenth of a burst's allocations.)
func (p *pool) submitAnswered(calls []*tickCall) {
	if len(calls) == 0 {
		return
	}
	p.mu.Lock()
	for _, c := range calls {
		p.granted.push(task{call: c})
	}
	p.asking.Add(-int64(len(calls)))
	if p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// handingOut tells the pool whether the loop is handing out a burst (see
// pool.burst). Released, it gets a worker spinning for the tasks of later
// that waited for it.
func (p *pool) handingOut(on bool) {
	p.mu.Lock()
	p.burst = on
	if !on && p.waitingLocked() && p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// laterLocked queues t, an end of a run (t.ran), in later (see pool.later). The worker that ran
// the task t came from calls it, on its way back to the queue: it counts
// as the spinning worker that will take t or what goes before it, so no
// other worker is woken for t.
func (p *pool) laterLocked(t task) {
	p.later.push(laterTask{ran: t.ran, at: p.now(), atc: p.clockNow()})
}

// waitingLocked reports whether a task waits that may be taken now.
func (p *pool) waitingLocked() bool {
	return p.granted.len() > 0 || p.queue.len() > 0 || p.laterDueLocked(false)
}

// laterDueLocked reports whether the head of later is to be taken now:
// it waited maxDefer, or nothing goes before it (busy: another task
// waits).
func (p *pool) laterDueLocked(busy bool) bool {
	if p.later.len() == 0 {
		return false
	}
	if !busy && (!p.burst && p.asking.Load() == 0 || p.closed) {
		return true
	}
	head := p.later.front()
	return p.now()-head.at >= maxDefer || p.clock != nil && p.clockNow()-head.atc >= maxDefer
}

// takeLocked takes the next task, if one may be taken now. It decides on
// its own reading, not on an earlier waitingLocked's: asking moves outside
// the lock (a batched tick asks from any worker), so a head of later that
// was due when nothing was asking may no longer be, and a worker that then
// took from an empty queue ran a zero task (a panic in handleTick).
func (p *pool) takeLocked() (task, bool) {
	busy := p.granted.len() > 0 || p.queue.len() > 0
	switch {
	case p.laterDueLocked(busy):
		return task{ran: p.later.pop().ran}, true
	case p.granted.len() > 0:
		return p.granted.pop(), true
	case p.queue.len() > 0:
		return p.queue.pop(), true
	}
	return task{}, false
}

// spinLocked gets one more worker spinning: a parked one, or a new one.
func (p *pool) spinLocked() {
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
func (p *pool) worker() {
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

// armLaterLocked arms the timer that keeps the bound of later (maxDefer)
// while no worker is awake to check it, and the injected clock's (see
// pool.clock).
func (p *pool) armLaterLocked() {
	if p.laterArmed {
		return
	}
	p.laterArmed = true
	d := max(maxDefer-(p.now()-p.later.front().at), 0)
	if p.laterTimer == nil {
		p.laterTimer = time.AfterFunc(d, p.laterDue)
	} else {
		p.laterTimer.Reset(d)
	}
	if p.clock == nil {
		return
	}
	d = max(maxDefer-(p.clockNow()-p.later.front().atc), 0)
	if p.clockTimer == nil {
		p.clockTimer = p.clock.AfterFunc(d, p.laterDue)
	} else {
		p.clockTimer.Reset(d)
	}
}

// laterDue runs when the head of later may have waited maxDefer.
func (p *pool) laterDue() {
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

// close ends the workers once the queue is drained and waits for them. No
// task may be submitted after it is called.
func (p *pool) close() {
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

// setClock bounds the wait in later by maxDefer of c too, the scheduler's
// clock when it is not the machine's (see pool.clock).
func (p *pool) setClock(c Clock) {
	p.clock, p.clockEpoch = c, c.Now()
}

// clockNow reads the injected clock (pool.clock) as a duration; zero
// without one.
func (p *pool) clockNow() time.Duration {
	if p.clock == nil {
		return 0
	}
	return p.clock.Now().Sub(p.clockEpoch)
}
