package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/locking"
)

// ReleaseAll is Release for many handles at once: the runs of a burst end
// together, and their releases cost a few round trips instead of one each.
// On one server (standalone or Sentinel) each round trip is one
// releases.lua script for up to tickBatch locks; on a Cluster, a pipeline
// of release.lua scripts (go-redis splits it by master). errs[i] is what
// Release would have returned for hs[i]: each lock is deleted only if it is
// still hs[i]'s (else ErrLockLost), and an error of the round trip is the
// error of each handle in it.
func (l *Locker) ReleaseAll(ctx context.Context, hs []*locking.Handle) (errs []error) {
	errs = make([]error, len(hs))
	sts := make([]*heldLock, len(hs))
	pending := make([]int, 0, len(hs))
	for i, h := range hs {
		st, err := l.state(h)
		if err == nil {
			err = canceled(ctx, "release", h)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		sts[i] = st
		pending = append(pending, i)
	}
	_, cluster := l.client.(*goredis.ClusterClient)
	for len(pending) > 0 {
		batch := pending[:min(len(pending), tickBatch)]
		pending = pending[len(batch):]
		if err := ctx.Err(); err != nil {
			for _, i := range append(batch, pending...) {
				errs[i] = fmt.Errorf("locking/redis: release %v: %w", hs[i], context.Cause(ctx))
			}
			return errs
		}
		opCtx, cancel := l.opContext(ctx)
		deleted, err := l.releaseBatch(opCtx, cluster, sts, batch)
		cancel()
		for j, i := range batch {
			e := err
			if e == nil {
				e = deleted[j]
			}
			errs[i] = l.released(ctx, hs[i], e)
		}
	}
	return errs
}

// releaseBatch deletes the locks sts[i], i in batch, that are still
// theirs. err is the round trip's; else each of results is nil (deleted),
// errLost (not ours) or that release's own error.
func (l *Locker) releaseBatch(ctx context.Context, cluster bool, sts []*heldLock, batch []int) (results []error, err error) {
	results = make([]error, len(batch))
	if cluster {
		cmds := make([]*goredis.Cmd, len(batch))
		// The pipeline's own error is that of its first failed command;
		// each command keeps its own, read below.
		_, _ = l.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for j, i := range batch {
				cmds[j] = p.EvalSha(ctx, releaseScript.Hash(), sts[i].keys[:1], sts[i].args[:1]...)
			}
			return nil
		})
		for j, i := range batch {
			if err := cmds[j].Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				// Not run (the script cache was flushed): Run loads it.
				cmds[j] = releaseScript.Run(ctx, l.client, sts[i].keys[:1], sts[i].args[:1]...)
			}
			results[j] = lostUnless(replyInt(cmds[j]))
		}
		return results, nil
	}
	keys := make([]string, len(batch))
	args := make([]any, len(batch))
	for j, i := range batch {
		keys[j], args[j] = sts[i].keys[0], sts[i].args[0]
	}
	r, err := replyInts(releasesScript.Run(ctx, l.client, keys, args...), len(batch))
	if err != nil {
		return nil, err
	}
	for j, n := range r {
		results[j] = lostUnless(n, nil)
	}
	return results, nil
}

// errLost marks a lock releaseBatch found gone or someone else's.
var errLost = locking.ErrLockLost

// lostUnless turns a release script's reply into releaseBatch's result.
func lostUnless(n int64, err error) error {
	switch {
	case err != nil:
		return err
	case n != 1:
		return errLost
	}
	return nil
}

// released is Release's answer for h from the outcome err of its delete
// (nil: deleted; errLost: not ours; else the call failed), as release
// reports it.
func (l *Locker) released(ctx context.Context, h *locking.Handle, err error) error {
	switch {
	case err == errLost:
		l.forget(h)
		return fmt.Errorf("locking/redis: release %v: %w", h, locking.ErrLockLost)
	case err != nil:
		return l.opError(ctx, "release", h.Key(), err)
	}
	l.forget(h)
	return nil
}
