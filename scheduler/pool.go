package scheduler

import "sync"

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

// task is one unit of work for a worker: a fired tick, or one whose
// batched try-lock-tick was answered (call; batch.go).
type task struct {
	f    fired
	call *tickCall
	// turn: f waited for its turn (prefer.go) and now asks.
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
	run func(task)

	mu    sync.Mutex
	cond  sync.Cond // parked workers wait here
	queue []task
	head  int // queue[head:] is waiting
	// granted are ticks whose batched try-lock-tick was answered (batch.go),
	// taken before any of queue, in order: their lease is running, while
	// a tick of queue has not asked yet. FIFO between the two had the
	// answered ticks of a 10,000-tick burst wait behind every request not
	// yet sent, so their jobs started only once all of them had asked.
	granted  []task
	ghead    int  // granted[ghead:] is waiting
	spinning int  // workers on their way to the queue (see above)
	idle     int  // parked workers not yet woken
	parked   int  // parked workers, woken or not
	closed   bool // no more tasks: workers end once the queue is empty
	started  int  // workers started so far (the benchmarks report it)
	wg       sync.WaitGroup
}

func newPool(run func(task)) *pool {
	p := &pool{run: run}
	p.cond.L = &p.mu
	return p
}

// submit queues t.
func (p *pool) submit(t task) {
	p.mu.Lock()
	p.compactLocked()
	p.queue = append(p.queue, t)
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
	p.compactLocked()
	p.queue = append(p.queue, ts...)
	if p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// submitFirst queues ts, in order, ahead of every task submit and
// submitAll queued (see pool.granted).
func (p *pool) submitFirst(ts []task) {
	if len(ts) == 0 {
		return
	}
	p.mu.Lock()
	if p.ghead > 0 && p.ghead >= len(p.granted)/2 {
		n := copy(p.granted, p.granted[p.ghead:])
		clear(p.granted[n:])
		p.granted, p.ghead = p.granted[:n], 0
	}
	p.granted = append(p.granted, ts...)
	if p.spinning == 0 {
		p.spinLocked()
	}
	p.mu.Unlock()
}

// waitingLocked reports whether a task waits.
func (p *pool) waitingLocked() bool { return p.ghead < len(p.granted) || p.head < len(p.queue) }

// takeLocked takes the next task; one must wait.
func (p *pool) takeLocked() task {
	if p.ghead < len(p.granted) {
		t := p.granted[p.ghead]
		p.granted[p.ghead] = task{}
		p.ghead++
		if p.ghead == len(p.granted) {
			p.granted, p.ghead = p.granted[:0], 0
		}
		return t
	}
	t := p.queue[p.head]
	p.queue[p.head] = task{} // drop the references for the GC
	p.head++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	}
	return t
}

// compactLocked drops the consumed prefix before the queue grows, so a
// queue that never quite empties does not keep it forever.
func (p *pool) compactLocked() {
	if p.head > 0 && p.head >= len(p.queue)/2 {
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
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
		if p.waitingLocked() {
			t := p.takeLocked()
			// This worker may now block in t: hand the spinning on.
			p.spinning--
			if p.waitingLocked() && p.spinning == 0 {
				p.spinLocked()
			}
			p.mu.Unlock()
			p.run(t)
			p.mu.Lock()
			p.spinning++
			continue
		}
		p.spinning--
		if p.closed || p.parked >= maxIdleWorkers {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.parked++
		p.cond.Wait() // whoever wakes it counts it spinning
		p.parked--
	}
}

// close ends the workers once the queue is drained and waits for them. No
// task may be submitted after it is called.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.spinning += p.idle
	p.idle = 0
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
