package scheduler

import (
	"context"
	"fmt"

	"github.com/bext-dev/bext-scheduler/internal/batch"
	"github.com/bext-dev/bext-scheduler/internal/mutation"
	"github.com/bext-dev/bext-scheduler/internal/workpool"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Batching releases.
//
// The runs of a burst end together, and each release is a round trip of its
// own: a backend that can release many locks in one (locking.ReleaseBatcher) gets
// the releases that wait together in one batch, by the same group commit as
// try-lock-tick (internal/batch). A lone release is sent at once, alone, with no
// timer holding it back: step 7's "release at once" still holds, and the
// next tick of a schedule is as free to run on any node as before. (Under
// a burst the end of a run, release included, waits behind the ticks not
// yet started, at most workpool.MaxDefer, and only when that cannot hold the lock
// into the schedule's next tick: pool.later, jobReturned.)
//
// Nothing of a release moves: each handle is released by the backend only
// if its lock is still the handle's, as Release does, and each release's
// outcome is reported as a single release's is (loop.go's release logs
// it); an error of the round trip is the error of every handle in it.

// releaser sends a scheduler's releases in batches (internal/batch). A
// call's tag is the tick whose run the lock was taken for, when the
// release ends that tick (releaseAfterRun: nobody waits for it); nil for
// a caller of Do.
type (
	releaser    = batch.Batcher[*locking.Handle, struct{}, *tick]
	releaseCall = batch.Call[*locking.Handle, struct{}, *tick]
)

// newReleaser returns a releaser for l, nil when l cannot batch releases,
// or need not (locking.InProcessLocker).
// deliver ends the ticks whose releases were sent by releaseAfterRun.
func newReleaser(l Locker, deliver func([]*releaseCall)) *releaser {
	rb, ok := l.(locking.ReleaseBatcher)
	if !ok {
		return nil
	}
	if inProcess(l) {
		// No round trip to share: the worker releases, as it asks.
		return nil
	}
	return &releaser{
		Send: func(ctx context.Context, hs []*locking.Handle) ([]struct{}, []error) {
			errs := rb.ReleaseAll(ctx, hs)
			return make([]struct{}, len(errs)), errs
		},
		Short:   errShortRelease,
		Deliver: deliver,
	}
}

// errShortRelease answers the releases a backend left unanswered: a broken
// locking.ReleaseBatcher. The lock may still be held; it expires with its TTL, as
// after any release that failed.
var errShortRelease = fmt.Errorf("scheduler: the lock backend left a batched release unanswered: %w", locking.ErrUnavailable)

// releaseLock is the Release of step 7: batched when the backend can.
func (s *Scheduler) releaseLock(ctx context.Context, h *locking.Handle) error {
	if s.rel == nil {
		return s.opts.Locker.Release(ctx, h)
	}
	_, err := s.rel.Do(ctx, h)
	return err
}

// releaseAfterRun is step 7 for a tick whose job has returned: its lock
// is given back, and the tick ended (end). With a locking.ReleaseBatcher
// the worker does not wait for the release: it queues it (sending batches
// itself only while fewer than MaxSenders are under way, as any caller of
// the batcher) and is free to start the next job; the sender of the batch
// ends the tick once its lock is given back (released). A worker that
// waited for its release was a worker blocked: under a burst the pool
// started hundreds more to keep the queue moving.
//
// Nothing moves in what the tick's schedule sees: the tick ends, and its
// schedule no longer counts it running, only after its lock was
// released, as when the worker waited. So the schedule's next tick, when
// it fires, finds its lock free (or, if it fires before, waits for the
// release with overlap = "skip": retryWaitingLocked); and a tick is owed
// to the shutdown's wait until its release has been answered.
func (s *Scheduler) releaseAfterRun(t *tick) {
	if mutation.On(mutation.ReleaseDeferred) { // mutation (simmut tag only): the release waits past the next tick
		s.mutantHoldRelease(t)
	}
	if s.rel == nil {
		s.release(t.def.ID, t.lease.h, "after the run")
		s.end(t, t.out)
		return
	}
	b := t.batched
	if b == nil {
		b = new(batched) // a tick whose backend batches releases, not try-lock-ticks
		t.batched = b
	}
	b.rel = releaseCall{Ctx: s.releaseCtx(), Req: t.lease.h, Tag: t}
	s.rel.Submit(&b.rel)
}

// released ends the ticks whose locks a batch gave back (releaseAfterRun),
// under one acquisition of s.mu for the whole batch.
func (s *Scheduler) released(calls []*releaseCall) {
	for _, c := range calls {
		s.logRelease(c.Tag.def.ID, c.Req, "after the run", c.Err)
	}
	s.endReleased(calls)
}

// jobReturned is told by the worker whose locked tick's job returned
// before the tick's end, release included, is done or deferred
// (pool.returned). It reports whether the end may wait in pool.later:
// not when waiting MaxDefer could hold the schedule's lock past its next
// tick minus max_clock_skew, when a node whose clock runs ahead by that
// much asks for it. (A tick's own lock, overlap = "allow", holds no other
// tick off.)
func (s *Scheduler) jobReturned(t *tick) (mayDefer bool) {
	if t.def.Overlap == OverlapAllow {
		return true
	}
	now := s.clock.Now()
	next := t.def.Spec.Next(now)
	return next.IsZero() || next.Sub(now)-s.opts.MaxClockSkew >= workpool.MaxDefer
}
