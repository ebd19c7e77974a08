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
// next tick of a schedule is as free to run on any node as before.
//
// Nothing of a release moves: each handle is released by the backend only
// if its lock is still the handle's, as Release does, and each release's
// outcome is reported as a single release's is (loop.go's release logs
// it); an error of the round trip is the error of every handle in it.

// ReleaseBatcher is implemented by lock backends that release many locks
// in one round trip (locking/redis, locking/memory). errs[i] must be what
// Release would have returned for hs[i]; an error of the round trip is
// errs[i] for every i.
type ReleaseBatcher interface {
	ReleaseAll(ctx context.Context, hs []*locking.Handle) (errs []error)
}

// releaser sends a scheduler's releases in batches.
type (
	releaser    = batcher[*locking.Handle, struct{}, releaseWait]
	releaseCall = batchCall[*locking.Handle, struct{}, releaseWait]
)

// releaseWait is a run's release of step 7 made without a waiting
// goroutine (releaseAfterRun): the tick and its run's outcome, recorded
// (step 8) once the release is answered.
type releaseWait struct {
	f   fired
	out runOutcome
}

// newReleaser returns a releaser for l, nil when l cannot batch releases;
// deliver gets the answered releases made by releaseAfterRun.
func newReleaser(l Locker, deliver func([]*releaseCall)) *releaser {
	rb, ok := l.(ReleaseBatcher)
	if !ok {
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

// releaseAfterRun is step 7 after tick f's run, then step 8 with the run's
// outcome out, and the end of f (s.wg). Batched, no goroutine waits for
// the release: in a burst a worker parked in each release was a worker
// started (and its stack grown) for each run. The tick is recorded once
// the release is answered (deliverReleases), as it was after a release
// made in line.
func (s *Scheduler) releaseAfterRun(f fired, h *locking.Handle, out runOutcome) {
	if s.rel == nil {
		s.release(f.def.ID, h, releaseAfterRunWhy)
		s.finish(f, out)
		s.wg.Done()
		return
	}
	s.rel.submit(&releaseCall{ctx: s.releaseCtx(), req: h, tag: releaseWait{f: f, out: out}})
}

const releaseAfterRunWhy = "after the run"

// deliverReleases hands the ticks whose release after the run was
// answered back to the pool, to be recorded (released).
func (s *Scheduler) deliverReleases(calls []*releaseCall) {
	tasks := make([]task, len(calls))
	for i, c := range calls {
		tasks[i] = task{rel: c}
	}
	s.work.submitAll(tasks)
}

// released logs the outcome of c's release as release does, then records
// its tick (step 8).
func (s *Scheduler) released(c *releaseCall) {
	s.releaseOutcome(c.tag.f.def.ID, c.req, releaseAfterRunWhy, c.err)
	s.finish(c.tag.f, c.tag.out)
	s.wg.Done()
}
