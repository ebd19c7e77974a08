package locking

import "context"

// The optional interfaces by which a backend tells the scheduler how to
// send it many requests: in batches (TickBatcher, ReleaseBatcher), or not
// at all because it decides in the caller's goroutine (InProcessLocker).
// The scheduler's group commit that uses them is scheduler/batch.go and
// scheduler/release.go.

// TickBatcher is implemented by lock backends that decide many
// try-lock-ticks in one round trip (locking/redis, locking/pg).
// answers[i] and errs[i] must be what TryLockTick would have returned for
// reqs[i]; an error of the round trip is errs[i] for every i.
type TickBatcher interface {
	TryLockTicks(ctx context.Context, reqs []TickRequest) (answers []TickAnswer, errs []error)
}

// ReleaseBatcher is implemented by lock backends that release many locks
// in one round trip (locking/redis, locking/memory; locking/pg, one round
// trip per session holding them). errs[i] must be what Release would have
// returned for hs[i]; an error of the round trip is errs[i] for every i.
type ReleaseBatcher interface {
	ReleaseAll(ctx context.Context, hs []*Handle) (errs []error)
}

// InProcessLocker is implemented by lock backends that decide in the
// caller's goroutine, with no round trip (locking/memory). Their
// try-lock-ticks are not batched even if they could be: a batch saves
// nothing there, and it cost what a round trip would have. On the memory
// backend the batches of a burst held 2 to 4 requests, so a tick paid a
// batch's costs (its queue, the hand back of its answer to the pool, and
// a second task for it) alone: a fifth of the CPU each tick spent before
// its job started (scheduler's BenchmarkSameSecond10k's p99-start-cpu-ms).
//
// The same holds for their releases (the scheduler's newReleaser), and a
// node-local tick reads their pause flags without a timeout
// (nodeLocalPaused). Their answers are never lost, so their
// try-lock-ticks carry no token of the scheduler's for a resend
// (lockRequest).
type InProcessLocker interface {
	InProcess() bool
}
