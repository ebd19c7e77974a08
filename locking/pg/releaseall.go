package pg

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

// ReleaseAll is Release for many handles at once
// (locking.ReleaseBatcher): the runs of a burst end together, and their releases
// cost one round trip per session holding their locks instead of one per
// lock. A lock can only be given back by the session that took it, so the
// handles are grouped by session; each group is sent as one pgx batch of
// Release's own statements on its session (up to tickBatch of them per
// round trip), and the groups of different sessions are sent in parallel.
//
// errs[i] is what Release would have returned for hs[i]: a handle of
// another Locker, or one already released or lost, is answered without
// asking; a lock its session no longer holds is ErrLockLost; a session
// found dead, or whose round trip fails, is given up (abandon) and every
// lock of the batch on it is reported lost, as Release reports it (an
// error of the round trip is the error of every handle in it). Two handles of one lock
// (the same handle twice, or a resent tick's copy) release it once: the
// later one is answered as a Release after the first.
//
// Each lease's mu is held from its check to its answer, as Release holds
// it, so a Renew or Close of the same lock waits. They are taken in the
// order the locks were taken (lease.seq), so two ReleaseAll calls over the
// same handles never wait for each other in a cycle. The statements of a
// batch run in one transaction (the extended protocol's implicit one), and
// a tick lock's release clears its row's token, so a batch writes its
// rows by key, bytewise: the order of TryLockTicks's batches, which lock
// the same rows, so the two never deadlock.
func (l *Locker) ReleaseAll(ctx context.Context, hs []*locking.Handle) (errs []error) {
	errs = make([]error, len(hs))
	items := make([]releaseItem, 0, len(hs))
	var later []int // hs[i] whose lock an earlier handle names
	seen := make(map[*lease]struct{}, len(hs))
	for i, h := range hs {
		ls, err := l.leaseOf(h)
		if err != nil {
			errs[i] = err
			continue
		}
		if _, dup := seen[ls]; dup {
			later = append(later, i)
			continue
		}
		seen[ls] = struct{}{}
		items = append(items, releaseItem{i: i, ls: ls})
	}
	slices.SortFunc(items, func(a, b releaseItem) int { return cmp.Compare(a.ls.seq, b.ls.seq) })
	for _, it := range items {
		it.ls.mu.Lock()
	}
	var groups [][]releaseItem
	group := make(map[*session]int)
	for _, it := range items {
		ls := it.ls
		if err := ctx.Err(); err != nil {
			// Not asked: the lock stays held and the session usable.
			errs[it.i] = fmt.Errorf("locking/pg: release %q: %w", ls.key, err)
			if ls.done {
				errs[it.i] = l.doneErr(ls)
			}
			ls.mu.Unlock()
			continue
		}
		if ls.done {
			// Lost before: the grant is given up all the same (Release).
			l.forgetGrants(ctx, []*lease{ls})
			errs[it.i] = l.doneErr(ls)
			ls.mu.Unlock()
			continue
		}
		g, ok := group[ls.sess]
		if !ok {
			g = len(groups)
			group[ls.sess] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], it)
	}
	var wg sync.WaitGroup
	for _, g := range groups[min(1, len(groups)):] {
		wg.Go(func() { l.releaseGroup(ctx, g, errs) })
	}
	if len(groups) > 0 {
		l.releaseGroup(ctx, groups[0], errs)
	}
	wg.Wait()
	for _, i := range later {
		errs[i] = l.Release(ctx, hs[i])
	}
	return errs
}

// releaseItem is a handle of ReleaseAll (hs[i]) and its lease.
type releaseItem struct {
	i  int
	ls *lease
}

// releaseGroup releases items, whose leases are all on one session, mu
// held and not done, in round trips of up to tickBatch locks by row key,
// writing each answer to errs[item.i] and unlocking each mu.
func (l *Locker) releaseGroup(ctx context.Context, items []releaseItem, errs []error) {
	slices.SortStableFunc(items, func(a, b releaseItem) int { return cmp.Compare(a.ls.rowKey, b.ls.rowKey) })
	s := items[0].ls.sess
	leases := make([]*lease, len(items))
	answers := make([]error, len(items))
	for j, it := range items {
		leases[j] = it.ls
	}
	for lo := 0; lo < len(items); lo += tickBatch {
		hi := min(lo+tickBatch, len(items))
		l.unlockOn(ctx, s, leases[lo:hi], answers[lo:hi])
	}
	l.forgetGrants(ctx, leases)
	for j, it := range items {
		errs[it.i] = answers[j]
		it.ls.mu.Unlock()
	}
}

// unlockOn gives back the locks of leases, all taken on session s, in one
// round trip (and forgets the tokens of tick grants): Release's statement,
// or a batch of them in one transaction. Each lease's mu must be held and
// the lease not done; errs[j] gets Release's answer for leases[j]. A
// failure leaves the session in doubt: it is given up (abandon), which
// ends every lock on it once no holder can count on them.
func (l *Locker) unlockOn(ctx context.Context, s *session, leases []*lease, errs []error) {
	if l.deadErrs("release", s, leases, errs) {
		return
	}
	ctx, cancel := l.stmtCtx(ctx)
	defer cancel()
	lost := func(err error) {
		for j, ls := range leases {
			ls.done = true
			errs[j] = lostErr("release", ls.key, err)
		}
	}
	if err := l.use(ctx, s); err != nil {
		if l.deadErrs("release", s, leases, errs) {
			return
		}
		l.kill(s, err)
		lost(err)
		return
	}
	var (
		one      bool   // leases[0] was unlocked (one lease)
		unlocked []bool // leases[j] was unlocked (a batch)
		err      error
	)
	if len(leases) == 1 {
		// Release's path: a plain query, no batch to allocate (a
		// TryLock+Release costs 30 allocations, as before ReleaseAll).
		sql, args := l.unlockStmt(leases[0])
		row := s.conn.QueryRow(ctx, sql, args...)
		if leases[0].tick {
			var forgot int64
			err = row.Scan(&one, &forgot)
		} else {
			err = row.Scan(&one)
		}
	} else {
		unlocked = make([]bool, len(leases))
		var forgot int64
		b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(leases))}
		for _, ls := range leases {
			sql, args := l.unlockStmt(ls)
			b.Queue(sql, args...)
		}
		br := s.conn.SendBatch(ctx, b)
		for j, ls := range leases {
			if err = br.QueryRow().Scan(unlockDest(ls, &unlocked[j], &forgot)...); err != nil {
				break
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		// In doubt whether the locks are still held: only the session's
		// end is sure to end them.
		l.killOwned(s, err)
		l.release(s)
		lost(err)
		return
	}
	for j, ls := range leases {
		if unlocked != nil {
			one = unlocked[j]
		}
		if !one {
			errs[j] = fmt.Errorf("locking/pg: %w: release %q: the session did not hold the advisory lock", locking.ErrLockLost, ls.key)
		} else {
			ls.grantOpen = false // releaseTickSQL forgot it with the unlock
		}
		l.forget(ls)
	}
	l.release(s)
}

// unlockStmt is ls's release statement and its arguments: releaseTickSQL
// for a tick grant, releaseSQL otherwise.
func (l *Locker) unlockStmt(ls *lease) (string, []any) {
	if ls.tick {
		return releaseTickSQL, []any{ls.id, l.opts.Namespace, ls.rowKey, ls.token, ls.tickUS}
	}
	if ls.req != nil && !ls.req.Backfill && ls.token != "" && !ls.heard && !ls.closing {
		return releaseTakeSQL, []any{ls.id, l.opts.Namespace, ls.key, ls.token}
	}
	return releaseSQL, []any{ls.id}
}

// unlockDest is where unlockStmt's answer row goes.
func unlockDest(ls *lease, unlocked *bool, forgot *int64) []any {
	if ls.tick {
		return []any{unlocked, forgot}
	}
	return []any{unlocked}
}
