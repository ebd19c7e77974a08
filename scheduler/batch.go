package scheduler

import (
	"fmt"

	"github.com/bext-dev/bext-scheduler/internal/batch"
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

// tickBatcher batches try-lock-ticks (internal/batch); a call's tag is
// its tick, into which the sender writes the answer and the clock
// readings around the round trip (sendingRequests, deliverAnswers).
type (
	tickBatcher = batch.Batcher[locking.TickRequest, locking.TickAnswer, *tick]
	tickCall    = batch.Call[locking.TickRequest, locking.TickAnswer, *tick]
)

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
	return &tickBatcher{Send: b.TryLockTicks, Short: errShortBatch, Deliver: deliver, Sending: sending}
}

// errShortBatch answers the requests a backend left unanswered: a broken
// locking.TickBatcher. Such a request is undecided (it wraps ErrUnavailable): it
// is resent, and skipped as backend_error, rather than run, once it can
// no longer be.
var errShortBatch = fmt.Errorf("scheduler: the lock backend left a batched try-lock-tick unanswered: %w", locking.ErrUnavailable)
