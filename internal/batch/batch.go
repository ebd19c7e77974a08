// Package batch is group commit for a lock backend's round trips: the
// requests that wait while a batch is on its way go together in the next
// one, with no goroutine of its own and no timer holding a lone request
// back. The scheduler batches its try-lock-ticks and its releases with it
// (locking.TickBatcher, locking.ReleaseBatcher; docs/DESIGN.md, "The tick
// path").
package batch

import (
	"context"
	"sync"
)

const (
	// MaxBatch bounds the requests of one TryLockTicks call: enough to
	// carry a burst in a few round trips, few enough that the backend
	// answers a batch in milliseconds.
	MaxBatch = 500
	// MaxSenders bounds the batches in flight at once: the connections a
	// burst keeps busy, and how far batches overlap their round trips.
	MaxSenders = 4
)

// Batcher sends requests of one kind in batches (group commit): the
// scheduler's try-lock-ticks (tickBatcher) and its releases (release.go).
// No goroutine of its own: a caller that queues its request while fewer
// than MaxSenders batches are under way becomes a sender, and sends batch
// after batch from the head of the queue until it finds the queue empty,
// so a lone request is sent at once, alone.
//
// A tick does not wait for its answer on a goroutine of its own: the
// sender hands the answered ticks back to the pool (Deliver), where a
// worker carries each on from step 4's answer (the scheduler's answered step).
// With a goroutine parked per waiting tick, a burst of 10,000 ticks kept
// hundreds to thousands of workers (and their stacks) alive; now only the
// senders wait, at most MaxSenders of them. A release is short: its caller
// waits (do).
type Batcher[R, A, T any] struct {
	// Send answers a batch: answers[i] and errs[i] for reqs[i].
	Send func(ctx context.Context, reqs []R) (answers []A, errs []error)
	// Short is the error of a request Send left unanswered.
	Short error
	// Deliver hands answered asynchronous calls (those with no Wake) back
	// to the scheduler, in the order they were answered.
	Deliver func([]*Call[R, A, T])
	// Sending, when set, is called with each batch just before it is
	// sent: one reading of the clocks for the whole batch, not one per
	// request (tickBatcher's send times).
	Sending func([]*Call[R, A, T])

	mu      sync.Mutex
	queue   []*Call[R, A, T] // not yet sent, in arrival order
	senders int              // callers sending batches
}

// Call is one request, waiting in the queue or in a batch; Tag is
// what its caller needs back with the answer.
type Call[R, A, T any] struct {
	Ctx context.Context
	Req R
	// Ans is the backend's answer; with Err set it is not to be acted
	// on, but may hold what the backend took (a grant whose request
	// ended mid-trip, which the scheduler still runs if it can).
	Ans A
	Err error
	// Wake, for a caller of Do, is closed once answered; without it the
	// call is asynchronous and answered through Batcher.Deliver.
	Wake chan struct{}
	Tag  T
}

// Do queues req and waits for its answer.
func (b *Batcher[R, A, T]) Do(ctx context.Context, req R) (A, error) {
	c := &Call[R, A, T]{Ctx: ctx, Req: req, Wake: make(chan struct{})}
	b.Submit(c)
	<-c.Wake
	return c.Ans, c.Err
}

// Submit queues c. When fewer than MaxSenders batches are under way, the
// caller sends batches itself (a lone request: at once) until none is
// left to send; otherwise it returns and a sender takes c.
func (b *Batcher[R, A, T]) Submit(c *Call[R, A, T]) {
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.senders >= MaxSenders {
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
func (b *Batcher[R, A, T]) sendOne() bool {
	b.mu.Lock()
	n := min(len(b.queue), MaxBatch)
	if n == 0 {
		b.senders--
		b.mu.Unlock()
		return false
	}
	batch := make([]*Call[R, A, T], n)
	copy(batch, b.queue)
	// Shift rather than reslice, so the queue's array does not keep
	// growing at its end while its head is consumed.
	k := copy(b.queue, b.queue[n:])
	clear(b.queue[k:])
	b.queue = b.queue[:k]
	b.mu.Unlock()

	if b.Sending != nil {
		b.Sending(batch)
	}
	// A request whose own context ended while it waited is not sent: it
	// is answered at once with its context's error, as it would have been
	// alone (its caller resends it or gives up). Sent, the backend could
	// grant it after its caller stopped waiting: the mark raised, and the
	// grant come too late to be used.
	live := batch
	for i, c := range batch {
		if c.Ctx.Err() == nil {
			continue
		}
		live = append(make([]*Call[R, A, T], 0, n), batch[:i]...)
		for _, c := range batch[i:] {
			if err := c.Ctx.Err(); err != nil {
				c.Err = err
			} else {
				live = append(live, c)
			}
		}
		break
	}
	if len(live) > 0 {
		reqs := make([]R, len(live))
		for i, c := range live {
			reqs[i] = c.Req
		}
		answers, errs := b.Send(batchContext(live), reqs)
		for i, c := range live {
			if i < len(answers) && i < len(errs) {
				c.Ans, c.Err = answers[i], errs[i]
			} else {
				c.Err = b.Short
			}
			if err := c.Ctx.Err(); err != nil && c.Err == nil {
				// Ended while the batch was on its way: alone, its round
				// trip would have ended with this error (batchContext).
				// The backend's answer stays in c.Ans, so the caller can
				// still act on what it took (a late grant).
				c.Err = err
			}
		}
	}
	async := batch[:0] // the calls without a waiter, in place
	for _, c := range batch {
		if c.Wake != nil {
			close(c.Wake)
		} else {
			async = append(async, c)
		}
	}
	if len(async) > 0 {
		b.Deliver(async)
	}
	return true
}

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
func batchContext[R, A, T any](batch []*Call[R, A, T]) context.Context {
	ctx := batch[0].Ctx
	d, ok := ctx.Deadline()
	for _, c := range batch[1:] {
		if !ok {
			break // no deadline: none ends later
		}
		if cd, cok := c.Ctx.Deadline(); !cok || cd.After(d) {
			ctx, d, ok = c.Ctx, cd, cok
		}
	}
	return ctx
}

// Pending reports the requests queued and not yet sent, and the callers
// sending batches now: what a test waits on, as nothing signals them.
func (b *Batcher[R, A, T]) Pending() (queued, senders int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue), b.senders
}
