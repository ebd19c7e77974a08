package scheduler

import (
	"context"
	"sync"
)

// group is the group commit of batch.go for requests a caller waits on
// (releases, release.go): the callers waiting for an answer send the
// batches themselves, so a lone request is sent at once, alone.
//
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
		answers, errs := b.send(groupContext(batch), reqs)
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

// groupContext returns the context of the batch's round trip: the one of
// its requests' contexts with the earliest deadline. Each tick's context
// bounds its request by its lock's TTL (burst), each release's by
// releaseTimeout; all of them derive from the scheduler's job context, so
// the earliest deadline ends first, and an answer arrives in time for every
// request of the batch or for none.
func groupContext[R, A any](batch []*groupCall[R, A]) context.Context {
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
