package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Batching try-lock-ticks.
//
// When thousands of locked ticks are due in the same second, one round trip
// per tick is what makes them late: the backend answers each request in
// microseconds, but the requests queue on the connections and on the
// server's per-command cost. A backend that can decide many requests in one
// round trip (locking.TickBatcher) gets them together: the ticks that reach step 4
// while a batch is on its way wait for the next one, and the next one takes
// all of them (group commit). A lone tick is sent at once, alone, as
// before; under a burst the batches grow by themselves, with no timer
// holding any request back.
//
// Nothing of a tick's decision moves: each request of a batch is decided by
// the backend on its own, atomically and on the backend's clock, exactly as
// TryLockTick would decide it (pause read inside the step, a resent request
// answered from its own lock, and so on), and each tick then goes on with
// its own answer as if it had asked alone. An error of the whole round trip
// is the error of every request in it: each of those ticks resends its
// request through the batcher, or is skipped as backend_error, as a failed
// TryLockTick would be (resend.go).

const (
	// maxBatch bounds the requests of one TryLockTicks call: enough to
	// carry a burst in a few round trips, few enough that the backend
	// answers a batch in milliseconds.
	maxBatch = 500
	// maxSenders bounds the batches in flight at once: the connections a
	// burst keeps busy, and how far batches overlap their round trips.
	maxSenders = 4
)

// batcher sends requests of one kind in batches (group commit): the
// scheduler's try-lock-ticks (tickBatcher) and its releases (release.go).
// No goroutine of its own: a caller that queues its request while fewer
// than maxSenders batches are under way becomes a sender, and sends batch
// after batch from the head of the queue until it finds the queue empty,
// so a lone request is sent at once, alone.
//
// A tick does not wait for its answer on a goroutine of its own: the
// sender hands the answered ticks back to the pool (deliver), where a
// worker carries each on from step 4's answer (Scheduler.lockAnswered).
// With a goroutine parked per waiting tick, a burst of 10,000 ticks kept
// hundreds to thousands of workers (and their stacks) alive; now only the
// senders wait, at most maxSenders of them. A release is short: its caller
// waits (do).
type batcher[R, A, T any] struct {
	// send answers a batch: answers[i] and errs[i] for reqs[i].
	send func(ctx context.Context, reqs []R) (answers []A, errs []error)
	// short is the error of a request send left unanswered.
	short error
	// deliver hands answered asynchronous calls (those with no wake) back
	// to the scheduler, in the order they were answered.
	deliver func([]*batchCall[R, A, T])
	// sending, when set, is called with each batch just before it is
	// sent: one reading of the clocks for the whole batch, not one per
	// request (tickBatcher's send times).
	sending func([]*batchCall[R, A, T])

	mu      sync.Mutex
	queue   []*batchCall[R, A, T] // not yet sent, in arrival order
	senders int                   // callers sending batches
}

// batchCall is one request, waiting in the queue or in a batch; tag is
// what its caller needs back with the answer.
type batchCall[R, A, T any] struct {
	ctx context.Context
	req R
	// ans is the backend's answer; with err set it is not to be acted
	// on, but may hold what the backend took (a grant whose request
	// ended mid-trip, which lockAnswered still runs if it can).
	ans A
	err error
	// wake, for a caller of do, is closed once answered; without it the
	// call is asynchronous and answered through batcher.deliver.
	wake chan struct{}
	tag  T
}

// tickBatcher batches try-lock-ticks; a call's tag is its tick.
type (
	tickBatcher = batcher[locking.TickRequest, locking.TickAnswer, tickWait]
	tickCall    = batchCall[locking.TickRequest, locking.TickAnswer, tickWait]
)

// tickWait is a batched tick and the lease clock and clock readings
// around its round trip (acquire in tick.go), read once per batch by its
// sender (sending) and once per answered batch (deliver).
type tickWait struct {
	f            fired
	sent, before time.Time
	after        time.Time
}

// inProcess reports whether l decides in the caller's goroutine
// (locking.InProcessLocker).
func inProcess(l any) bool {
	ip, ok := l.(locking.InProcessLocker)
	return ok && ip.InProcess()
}

// newBatcher returns a tickBatcher for l, nil when l cannot batch, or
// need not (locking.InProcessLocker).
func newBatcher(l Locker, deliver, sending func([]*tickCall)) *tickBatcher {
	b, ok := l.(locking.TickBatcher)
	if !ok {
		return nil
	}
	if inProcess(l) {
		return nil
	}
	return &tickBatcher{send: b.TryLockTicks, short: errShortBatch, deliver: deliver, sending: sending}
}

// do queues req and waits for its answer.
func (b *batcher[R, A, T]) do(ctx context.Context, req R) (A, error) {
	c := &batchCall[R, A, T]{ctx: ctx, req: req, wake: make(chan struct{})}
	b.submit(c)
	<-c.wake
	return c.ans, c.err
}

// submit queues c. When fewer than maxSenders batches are under way, the
// caller sends batches itself (a lone request: at once) until none is
// left to send; otherwise it returns and a sender takes c.
func (b *batcher[R, A, T]) submit(c *batchCall[R, A, T]) {
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.senders >= maxSenders {
		b.mu.Unlock()
		return
	}
	b.senders++
	b.mu.Unlock()
	for b.sendOne() {
	}
}

// sendOne sends one batch from the head of the queue and answers its
// calls. It reports false, no longer a sender, when the queue was empty.
func (b *batcher[R, A, T]) sendOne() bool {
	b.mu.Lock()
	n := min(len(b.queue), maxBatch)
	if n == 0 {
		b.senders--
		b.mu.Unlock()
		return false
	}
	batch := make([]*batchCall[R, A, T], n)
	copy(batch, b.queue)
	// Shift rather than reslice, so the queue's array does not keep
	// growing at its end while its head is consumed.
	k := copy(b.queue, b.queue[n:])
	clear(b.queue[k:])
	b.queue = b.queue[:k]
	b.mu.Unlock()

	if b.sending != nil {
		b.sending(batch)
	}
	// A request whose own context ended while it waited is not sent: it
	// is answered at once with its context's error, as it would have been
	// alone (its caller resends it or gives up). Sent, the backend could
	// grant it after its caller stopped waiting: the mark raised, and the
	// grant come too late to be used.
	live := batch
	for i, c := range batch {
		if c.ctx.Err() == nil {
			continue
		}
		live = append(make([]*batchCall[R, A, T], 0, n), batch[:i]...)
		for _, c := range batch[i:] {
			if err := c.ctx.Err(); err != nil {
				c.err = err
			} else {
				live = append(live, c)
			}
		}
		break
	}
	if len(live) > 0 {
		reqs := make([]R, len(live))
		for i, c := range live {
			reqs[i] = c.req
		}
		answers, errs := b.send(batchContext(live), reqs)
		for i, c := range live {
			if i < len(answers) && i < len(errs) {
				c.ans, c.err = answers[i], errs[i]
			} else {
				c.err = b.short
			}
			if err := c.ctx.Err(); err != nil && c.err == nil {
				// Ended while the batch was on its way: alone, its round
				// trip would have ended with this error (batchContext).
				// The backend's answer stays in c.ans, so the caller can
				// still act on what it took (lockAnswered: a late grant).
				c.err = err
			}
		}
	}
	async := batch[:0] // the calls without a waiter, in place
	for _, c := range batch {
		if c.wake != nil {
			close(c.wake)
		} else {
			async = append(async, c)
		}
	}
	if len(async) > 0 {
		b.deliver(async)
	}
	return true
}

// errShortBatch answers the requests a backend left unanswered: a broken
// locking.TickBatcher. Such a request is undecided (it wraps ErrUnavailable): it
// is resent, and skipped as backend_error, rather than run, once it can
// no longer be.
var errShortBatch = fmt.Errorf("scheduler: the lock backend left a batched try-lock-tick unanswered: %w", locking.ErrUnavailable)

// batchContext returns the context of the batch's round trip: the one of
// its requests' contexts that ends last. Each tick's context bounds its
// request by its lock's TTL (burst), each release's by releaseTimeout, and
// a batch can carry requests of different bursts; all of them derive from
// the scheduler's job context, so they are cancelled together and differ
// only in their deadlines. Ending the round trip at the earliest deadline
// failed every request of the batch with it, the ones the backend had
// granted too (their marks raised: run nowhere); sendOne gives a request
// that ended mid-trip its own context's error, as it would have had alone,
// and sends none that ended before the batch left.
func batchContext[R, A, T any](batch []*batchCall[R, A, T]) context.Context {
	ctx := batch[0].ctx
	d, ok := ctx.Deadline()
	for _, c := range batch[1:] {
		if !ok {
			break // no deadline: none ends later
		}
		if cd, cok := c.ctx.Deadline(); !cok || cd.After(d) {
			ctx, d, ok = c.ctx, cd, cok
		}
	}
	return ctx
}
