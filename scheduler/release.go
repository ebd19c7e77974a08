package scheduler

import (
	"context"
	"fmt"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Batching releases.
//
// The runs of a burst end together, and each release is a round trip of its
// own: a backend that can release many locks in one (ReleaseBatcher) gets
// the releases that wait together in one batch, by the same group commit as
// try-lock-tick (batch.go). A lone release is sent at once, alone, with no
// timer holding it back: step 7's "release at once" still holds, and the
// next tick of a schedule is as free to run on any node as before. (Under
// a burst the end of a run, release included, waits behind the ticks not
// yet started, at most maxDefer: pool.later.)
//
// Nothing of a release moves: each handle is released by the backend only
// if its lock is still the handle's, as Release does, and each release's
// outcome is reported as a single release's is (loop.go's release logs
// it); an error of the round trip is the error of every handle in it.

// ReleaseBatcher is implemented by lock backends that release many locks
// in one round trip (locking/redis, locking/memory; locking/pg, one round
// trip per session holding them). errs[i] must be what Release would have
// returned for hs[i]; an error of the round trip is errs[i] for every i.
type ReleaseBatcher interface {
	ReleaseAll(ctx context.Context, hs []*locking.Handle) (errs []error)
}

// releaser sends a scheduler's releases in batches. A call's tag is the
// tick whose run the lock was taken for, when the release ends that tick
// (releaseAfterRun: nobody waits for it); zero for a caller of do.
type (
	releaser    = batcher[*locking.Handle, struct{}, ranTick]
	releaseCall = batchCall[*locking.Handle, struct{}, ranTick]
)

// ranTick is a tick whose run has ended, and how it ended: what finish
// needs once the run's lock is given back.
type ranTick struct {
	f     fired
	out   runOutcome
	ran   ran
	lease lease // the run's (newTickLease)
}

// newReleaser returns a releaser for l, nil when l cannot batch releases,
// or need not (InProcessLocker).
// deliver ends the ticks whose releases were sent by releaseAfterRun.
func newReleaser(l Locker, deliver func([]*releaseCall)) *releaser {
	rb, ok := l.(ReleaseBatcher)
	if !ok {
		return nil
	}
	if inProcess(l) {
		// No round trip to share: the worker releases, as it asks.
		return nil
	}
	return &releaser{
		send: func(ctx context.Context, hs []*locking.Handle) ([]struct{}, []error) {
			errs := rb.ReleaseAll(ctx, hs)
			return make([]struct{}, len(errs)), errs
		},
		short:   errShortRelease,
		deliver: deliver,
	}
}

// errShortRelease answers the releases a backend left unanswered: a broken
// ReleaseBatcher. The lock may still be held; it expires with its TTL, as
// after any release that failed.
var errShortRelease = fmt.Errorf("scheduler: the lock backend left a batched release unanswered: %w", locking.ErrUnavailable)

// releaseLock is the Release of step 7: batched when the backend can.
func (s *Scheduler) releaseLock(ctx context.Context, h *locking.Handle) error {
	if s.rel == nil {
		return s.opts.Locker.Release(ctx, h)
	}
	_, err := s.rel.do(ctx, h)
	return err
}

// releaseAfterRun is step 7 for a run tick (c: its lock, and the tick with
// its outcome), then its end (finish). With a
// ReleaseBatcher the worker does not wait for the release: it queues it
// (sending batches itself only while fewer than maxSenders are under way,
// as any caller of the batcher) and is free to start the next job; the
// sender of the batch ends the tick once its lock is given back
// (released). A worker that waited for its release was a worker blocked:
// under a burst the pool started hundreds more to keep the queue moving.
//
// Nothing moves in what the tick's schedule sees: the tick is finished,
// and its schedule no longer counts it running, only after its lock was
// released, as when the worker waited. So the schedule's next tick, when
// it fires, finds its lock free (or, if it fires before, is skipped as
// still_running with overlap = "skip", as before); and a tick is owed to
// the shutdown's wait until its release has been answered.
func (s *Scheduler) releaseAfterRun(c *releaseCall) {
	if s.rel == nil {
		s.release(c.tag.f.def.ID, c.req, "after the run")
		s.finish(c.tag.f, c.tag.out)
		s.wg.Done()
		return
	}
	c.ctx = s.releaseCtx()
	s.rel.submit(c)
}

// released ends the ticks whose locks a batch gave back (releaseAfterRun),
// under one acquisition of s.mu for the whole batch.
func (s *Scheduler) released(calls []*releaseCall) {
	for _, c := range calls {
		s.logRelease(c.tag.f.def.ID, c.req, "after the run", c.err)
	}
	s.mu.Lock()
	for _, c := range calls {
		s.finishLocked(c.tag.f, c.tag.out)
	}
	s.notifyLocked()
	s.mu.Unlock()
	for range calls {
		s.wg.Done()
	}
}
