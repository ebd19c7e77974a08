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
// in one round trip (locking/redis, locking/memory; locking/pg, one round
// trip per session holding them). errs[i] must be what Release would have
// returned for hs[i]; an error of the round trip is errs[i] for every i.
type ReleaseBatcher interface {
	ReleaseAll(ctx context.Context, hs []*locking.Handle) (errs []error)
}

// releaser sends a scheduler's releases in batches.
type releaser = batcher[*locking.Handle, struct{}, struct{}]

// newReleaser returns a releaser for l, nil when l cannot batch releases.
func newReleaser(l Locker) *releaser {
	rb, ok := l.(ReleaseBatcher)
	if !ok {
		return nil
	}
	return &releaser{
		send: func(ctx context.Context, hs []*locking.Handle) ([]struct{}, []error) {
			errs := rb.ReleaseAll(ctx, hs)
			return make([]struct{}, len(errs)), errs
		},
		short: errShortRelease,
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
