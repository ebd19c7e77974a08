package scheduler

import (
	"context"
	"fmt"
	"sync"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Batching try-lock-ticks.
//
// When thousands of locked ticks are due in the same second, one round trip
// per tick is what makes them late: the backend answers each request in
// microseconds, but the requests queue on the connections and on the
// server's per-command cost. A backend that can decide many requests in one
// round trip (TickBatcher) gets them together: the ticks that reach step 4
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
// is the error of every request in it: each of those ticks is skipped as
// backend_error, as a failed TryLockTick would be.

// TickBatcher is implemented by lock backends that decide many
// try-lock-ticks in one round trip (locking/redis, locking/pg).
// answers[i] and errs[i] must be what TryLockTick would have returned for
// reqs[i]; an error of the round trip is errs[i] for every i.
type TickBatcher interface {
	TryLockTicks(ctx context.Context, reqs []locking.TickRequest) (answers []locking.TickAnswer, errs []error)
}

const (
	// maxBatch bounds the requests of one TryLockTicks call: enough to
	// carry a burst in a few round trips, few enough that the backend
	// answers a batch in milliseconds.
	maxBatch = 500
	// maxSenders bounds the batches in flight at once: the connections a
	// burst keeps busy, and how far batches overlap their round trips.
	maxSenders = 4
)

// tryLockTick is step 4's request: batched when the backend can, else
// TryLockTick.
func (s *Scheduler) tryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	if s.batch == nil {
		return s.opts.Locker.TryLockTick(ctx, req)
	}
	return s.batch.do(ctx, req)
}

// batcher sends the try-lock-ticks of a scheduler in batches.
type batcher = group[locking.TickRequest, locking.TickAnswer]

// newBatcher returns a batcher for l, nil when l cannot batch.
func newBatcher(l Locker) *batcher {
	b, ok := l.(TickBatcher)
	if !ok {
		return nil
	}
	return &batcher{send: b.TryLockTicks, short: errShortBatch}
}

// group sends requests of one kind in batches (group commit): a request
// made while fewer than maxSenders batches are on their way is sent at
// once, alone if it is alone; the ones made meanwhile wait and go together
// in the next batch. No goroutine of its own: the callers waiting for an
// answer send the batches, one batch each, and the one that sent a batch
// hands the sending on to a caller still queued when it leaves.
type group[R, A any] struct {
	// send answers a batch: answers[i] and errs[i] for reqs[i].
	send func(ctx context.Context, reqs []R) (answers []A, errs []error)
	// short is the error of a request send left unanswered.
	short error

	mu      sync.Mutex
	queue   []*groupCall[R, A] // not yet sent, in arrival order
	senders int                // batches being sent, or a caller told to send one
}

// groupCall is one request, waiting in the queue or in a batch.
type groupCall[R, A any] struct {
	ctx  context.Context
	req  R
	ans  A
	err  error
	wake chan struct{} // a signal: answered, or told to send (see below)
	// Under group.mu:
	answered bool
	send     int // batches this caller was told to send
}

// do queues req and returns its answer. The caller sends a batch itself
// when fewer than maxSenders are under way (a lone request: at once), or
// when a sender hands the sending on to it while it waits.
func (b *group[R, A]) do(ctx context.Context, req R) (A, error) {
	c := &groupCall[R, A]{ctx: ctx, req: req, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.senders < maxSenders {
		b.senders++
		c.send++
	}
	for {
		if c.send > 0 {
			c.send--
			b.mu.Unlock()
			b.sendOne()
			b.mu.Lock()
			continue
		}
		if c.answered {
			b.mu.Unlock()
			return c.ans, c.err
		}
		b.mu.Unlock()
		<-c.wake
		b.mu.Lock()
	}
}

// sendOne sends one batch from the head of the queue and answers its
// callers, then hands the sending on to the first caller still queued (or
// stops being a sender when none is).
func (b *group[R, A]) sendOne() {
	b.mu.Lock()
	n := min(len(b.queue), maxBatch)
	batch := make([]*groupCall[R, A], n)
	copy(batch, b.queue)
	// Shift rather than reslice, so the queue's array does not keep
	// growing at its end while its head is consumed.
	k := copy(b.queue, b.queue[n:])
	clear(b.queue[k:])
	b.queue = b.queue[:k]
	b.mu.Unlock()

	if n > 0 {
		reqs := make([]R, n)
		for i, c := range batch {
			reqs[i] = c.req
		}
		answers, errs := b.send(batchContext(batch), reqs)
		b.mu.Lock()
		for i, c := range batch {
			if i < len(answers) && i < len(errs) {
				c.ans, c.err = answers[i], errs[i]
			} else {
				c.err = b.short
			}
			c.answered = true
			signal(c.wake)
		}
		b.mu.Unlock()
	}

	b.mu.Lock()
	if len(b.queue) > 0 {
		next := b.queue[0]
		next.send++
		signal(next.wake)
	} else {
		b.senders--
	}
	b.mu.Unlock()
}

// errShortBatch answers the requests a backend left unanswered: a broken
// TickBatcher, whose ticks are skipped as backend_error rather than run.
var errShortBatch = fmt.Errorf("scheduler: the lock backend left a batched try-lock-tick unanswered: %w", locking.ErrUnavailable)

// batchContext returns the context of the batch's round trip: the one of
// its requests' contexts with the earliest deadline. Each tick's context
// bounds its request by its lock's TTL (burst), each release's by
// releaseTimeout; all of them derive from the scheduler's job context, so
// the earliest deadline ends first, and an answer arrives in time for every
// request of the batch or for none.
func batchContext[R, A any](batch []*groupCall[R, A]) context.Context {
	ctx := batch[0].ctx
	d, ok := ctx.Deadline()
	for _, c := range batch[1:] {
		if cd, cok := c.ctx.Deadline(); cok && (!ok || cd.Before(d)) {
			ctx, d, ok = c.ctx, cd, true
		}
	}
	return ctx
}

// signal wakes the goroutine waiting on ch (buffered, 1) if it is not
// woken already: it re-reads its state under group.mu when it wakes.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
