package scheduler

import (
	"context"
	"fmt"

	"github.com/bext-dev/bext-scheduler/internal/mutation"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Batching releases.
//
// The runs of a burst end together, and each release is a round trip of its
// own: a backend that can release many locks in one (locking.ReleaseBatcher) gets
// the releases that wait together in one batch, by the same group commit as
// try-lock-tick (batch.go). A lone release is sent at once, alone, with no
// timer holding it back: step 7's "release at once" still holds, and the
// next tick of a schedule is as free to run on any node as before. (Under
// a burst the end of a run, release included, waits behind the ticks not
// yet started, at most maxDefer, and only when that cannot hold the lock
// into the schedule's next tick: pool.later, jobReturned.)
//
// Nothing of a release moves: each handle is released by the backend only
// if its lock is still the handle's, as Release does, and each release's
// outcome is reported as a single release's is (loop.go's release logs
// it); an error of the round trip is the error of every handle in it.

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
		send: func(ctx context.Context, hs []*locking.Handle) ([]struct{}, []error) {
			errs := rb.ReleaseAll(ctx, hs)
			return make([]struct{}, len(errs)), errs
		},
		short:   errShortRelease,
		deliver: deliver,
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
	_, err := s.rel.do(ctx, h)
	return err
}

// releaseAfterRun is step 7 for a run tick (c: its lock, and the tick with
// its outcome), then its end (finish). With a
// locking.ReleaseBatcher the worker does not wait for the release: it queues it
// (sending batches itself only while fewer than maxSenders are under way,
// as any caller of the batcher) and is free to start the next job; the
// sender of the batch ends the tick once its lock is given back
// (released). A worker that waited for its release was a worker blocked:
// under a burst the pool started hundreds more to keep the queue moving.
//
// Nothing moves in what the tick's schedule sees: the tick is finished,
// and its schedule no longer counts it running, only after its lock was
// released, as when the worker waited. So the schedule's next tick, when
// it fires, finds its lock free (or, if it fires before, waits for the
// release with overlap = "skip": releasedLocked); and a tick is owed to
// the shutdown's wait until its release has been answered.
func (s *Scheduler) releaseAfterRun(c *releaseCall) {
	if mutation.On(mutation.ReleaseDeferred) { // mutation (simmut tag only): the release waits past the next tick
		s.mutantHoldRelease(c.tag.f)
	}
	if s.rel == nil {
		s.release(c.tag.f.def.ID, c.req, "after the run")
		s.mu.Lock()
		tries := s.releasedLocked(c, nil)
		s.notifyLocked()
		s.mu.Unlock()
		s.submitTries(tries)
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
	var tries []action
	s.mu.Lock()
	for _, c := range calls {
		tries = s.releasedLocked(c, tries)
	}
	s.notifyLocked()
	s.mu.Unlock()
	s.submitTries(tries)
	for range calls {
		s.wg.Done()
	}
}

// jobReturned is told by the worker whose locked tick's job returned (c:
// the rest of the tick) before its end, release included, is done or
// deferred (pool.returned). It counts the run as releasing its lock until
// it is finished (releasedLocked), and reports whether the end may wait
// in pool.later: not when waiting maxDefer could hold the schedule's lock
// past its next tick minus max_clock_skew, when a node whose clock runs
// ahead by that much asks for it. (A tick's own lock, overlap = "allow",
// holds no other tick off.)
func (s *Scheduler) jobReturned(t task) (mayDefer bool) {
	f := t.ran.tag.f
	f.st.releasing.Add(1)
	if f.def.Overlap != OverlapSkip {
		return true
	}
	now := s.clock.Now()
	next := f.def.Spec.Next(now)
	return next.IsZero() || next.Sub(now)-s.opts.MaxClockSkew >= maxDefer
}

// releasedLocked finishes the tick whose run's lock c gave back. When a
// tick of its schedule fired meanwhile and waits for that (waiting:
// popDueLocked), the schedule's latest tick is tried now, as the catch-up
// tries one, and appended to tries for submitTries: its lock was held
// when it fired, so every other node was told contended, which raises no
// mark, and this node did not skip it as still_running, its run having
// returned. The try is granted unless another node has claimed the tick
// since.
func (s *Scheduler) releasedLocked(c *releaseCall, tries []action) []action {
	f := c.tag.f
	st := f.st
	st.releasing.Add(-1)
	s.finishLocked(f, c.tag.out)
	if !st.waiting || st.active > 0 {
		return tries
	}
	st.waiting = false
	if st.removed || s.stopping {
		return tries
	}
	now := s.clock.Now()
	if tick := s.catchUpTickLocked(st, now); !tick.IsZero() {
		tries = append(tries, s.tryLateLocked(st, tick, now))
	}
	return tries
}
