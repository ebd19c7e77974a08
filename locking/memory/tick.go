package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/mutation"
	"github.com/bext-dev/bext-scheduler/locking"
)

// TryLockTick is try-lock-tick (locking.TickLocker): in one step under the
// shard mutexes of the key (its mark and pause flag) and of the lock (the
// key, or the tick's key with PerTick), it answers a resent call (same
// token, same T) from its own lock while that lock lives, from its grant's
// record once the lock's TTL ran out (shard.grants,
// locking.DecideLapsedResend), or, when a resend of it (Resend) was
// answered contended or done, or any attempt of it carrying a Token was
// answered paused or missed, decided anew, with that verdict and nothing
// changed (its record, kept as long: a late copy of an earlier attempt,
// or a resend after a lost reply), else decides with locking.DecideTick on
// the table's clock. A mark raised is then told to the table's watches
// (watch.go), after the shard mutexes are released.
func (l *Locker) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	ans, kept, err := l.tryLockTick(ctx, r)
	// An answer from a verdict record (paused or missed, kept for a
	// resend) raised nothing: its first attempt told the watches.
	if err == nil && !kept && ans.Verdict.Raised() && l.tab.watches.n.Load() > 0 {
		l.tab.watches.publish(locking.TickMark{Key: r.Key, Tick: r.Tick.Truncate(time.Microsecond)})
	}
	return ans, err
}

func (l *Locker) tryLockTick(ctx context.Context, r locking.TickRequest) (ans locking.TickAnswer, kept bool, err error) {
	if err := ctx.Err(); err != nil {
		return locking.TickAnswer{}, false, fmt.Errorf("locking/memory: try-lock-tick %q: %w", r.Key, err)
	}
	if l.closed.Load() {
		return locking.TickAnswer{}, false, fmt.Errorf("locking/memory: try-lock-tick %q: %w", r.Key, locking.ErrClosed)
	}
	if err := locking.CheckTickRequest(r); err != nil {
		return locking.TickAnswer{}, false, fmt.Errorf("locking/memory: try-lock-tick: %w", err)
	}
	lockKey := r.Key
	if r.PerTick {
		lockKey = locking.TickLockKey(r.Key, r.Tick)
	}
	ms, ls := l.tab.lockShards(r.Key, lockKey)
	defer unlockShards(ms, ls)
	// Checked again under the shard locks, as in TryLock: Close cannot miss
	// a lock taken here.
	if l.closed.Load() {
		return locking.TickAnswer{}, false, fmt.Errorf("locking/memory: try-lock-tick %q: %w", r.Key, locking.ErrClosed)
	}
	wall, now := l.tab.now()
	ans = locking.TickAnswer{Now: wall}
	mark, hasMark := ms.marks[r.Key]
	cur, held := ls.m[lockKey]
	held = held && now < cur.expires

	if held && r.Token != "" && cur.token == r.Token && cur.tick == r.Tick.UnixMicro() {
		// A resent call (its token and T): the first one took this lock and
		// its answer was lost. It is granted again with the same
		// acquisition, and the lease counts from now, as the caller
		// believes. The token alone is not enough: a schedule lock is the
		// same key for every T, and another T asked with a granted call's
		// token must not be handed that call's lock.
		cur.expires = expiry(now, r.TTL)
		ls.m[lockKey] = cur
		// Its record is kept from the extension as the lease is, with the
		// first attempt's Before, answered again.
		var before time.Time
		if _, i := ls.findGrant(lockKey, cur.token, cur.tick, now); i >= 0 {
			before = ls.grants[lockKey].recs[i].before
		}
		ls.keepGrant(lockKey, grantRec{token: cur.token, tick: cur.tick, fence: cur.fence,
			keep: expiry(now, locking.GrantKeep(r.TTL, 0)), before: before}, now)
		ans.Verdict, ans.Mark, ans.Before = locking.TickGranted, mark, before
		ans.Handle = locking.NewHandle(l, lockKey, cur.token, cur.fence, r.TTL, nil)
		return ans, false, nil
	}
	if r.Token != "" && len(ls.grants) != 0 {
		if kg, i := ls.findGrant(lockKey, r.Token, r.Tick.UnixMicro(), now); i >= 0 {
			// A resend whose lock's TTL ran out before it came: taken again
			// as the same acquisition when nothing came between, else told
			// expired. Another acquisition of the key since (kg.last) ended
			// the grant for good: continued, it would hold the lock under a
			// fence below that acquisition's.
			g := kg.recs[i]
			if g.decided != 0 {
				// A resend of this request was answered so, decided anew:
				// this is a late copy of an earlier attempt, or another
				// resend, and its node moved on. Granted, T would run
				// nowhere and the lock be held for nothing. Or an attempt
				// of it was answered paused or missed: a resend after that
				// reply was lost is told the same (decided anew, done),
				// and its node records the tick it consumed.
				ans.Verdict, ans.Mark = g.decided, mark
				if g.decided.Raised() {
					ans.Before = g.before
				}
				return ans, true, nil
			}
			paused := ms.pauses[r.Key].Active(wall)
			v := locking.DecideLapsedResend(r, mark, hasMark, paused, held || kg.last != g.fence)
			ans.Mark = mark
			if v != locking.TickGranted {
				ans.Verdict, ans.Fence = v, g.fence
				return ans, false, nil
			}
			ls.m[lockKey] = entry{owner: l, expires: expiry(now, r.TTL), fence: g.fence, token: g.token, tick: g.tick}
			g.keep = expiry(now, locking.GrantKeep(r.TTL, 0))
			ls.keepGrant(lockKey, g, now)
			ans.Verdict, ans.Before = locking.TickGranted, g.before
			ans.Handle = locking.NewHandle(l, lockKey, g.token, g.fence, r.TTL, nil)
			return ans, false, nil
		}
	}

	paused := ms.pauses[r.Key].Active(wall)
	if mutation.On(mutation.PauseOutsideStep) { // mutation (simmut tag only): the flag as read at the previous call
		paused = mutation.Stale(r.Key, paused)
	}
	v, newMark, ahead := locking.DecideTick(r, wall, mark, hasMark, paused, held)
	if ahead != 0 {
		return locking.TickAnswer{}, false, fmt.Errorf("locking/memory: try-lock-tick: %w",
			&locking.AheadError{Key: r.Key, Tick: r.Tick, Offset: ahead, MaxSkew: r.MaxSkew})
	}
	var token string
	if v == 0 {
		// Drawn before anything changes, so a failure leaves no trace.
		token = r.Token
		if token == "" {
			tok, err := ls.tokenString()
			if err != nil {
				return locking.TickAnswer{}, false, fmt.Errorf("locking/memory: try-lock-tick %q: %w", r.Key, err)
			}
			token = tok
		}
	}
	// Store the mark when the step raised it. A missing mark that the step
	// only read (as the clock minus MaxSkew) stays missing: stored, it
	// would stop moving with the clock.
	base := mark
	if !hasMark {
		base = wall.Add(-r.MaxSkew)
	}
	if newMark.After(base) {
		ms.marks[r.Key] = newMark
	}
	ans.Mark, ans.Before = newMark, locking.TickBefore(v, mark, hasMark)
	if v != 0 {
		if r.Token != "" && (v == locking.TickPaused || v == locking.TickMissed ||
			(r.Resend && (v == locking.TickContended || v == locking.TickDone))) {
			// A resend's verdict is kept, so that a late copy of an
			// earlier attempt is answered the same (the grant record
			// would have answered it, had there been a grant). A first
			// attempt answered contended writes nothing: it is sent
			// again only as a resend. Paused and missed are kept for a
			// first attempt too: its reply lost, its resend would be
			// answered done (the mark is at T), and its node would
			// record nothing of the tick it consumed.
			ls.keepGrant(lockKey, grantRec{token: r.Token, tick: r.Tick.UnixMicro(), decided: v,
				keep: expiry(now, locking.GrantKeep(r.TTL, 0)), before: ans.Before}, now)
		}
		ans.Verdict = v
		return ans, false, nil
	}
	// The fence is above the last of both shards: the schedule's fences
	// increase across its per-tick locks and its plain ones.
	ms.fence = max(ms.fence, ls.fence)
	fence := ms.nextFence(wall)
	ls.fence = fence
	ls.m[lockKey] = entry{owner: l, expires: expiry(now, r.TTL), fence: fence, token: token, tick: r.Tick.UnixMicro()}
	if r.Token != "" {
		// Only a caller's own token can be resent: a drawn one needs no
		// record (the scheduler on memory in its own process draws none).
		ls.keepGrant(lockKey, grantRec{token: token, tick: r.Tick.UnixMicro(), fence: fence,
			keep: expiry(now, locking.GrantKeep(r.TTL, 0)), before: ans.Before}, now)
	}
	ls.acquired(lockKey, fence)
	ls.sweepIfGrown(now)
	ans.Verdict = locking.TickGranted
	ans.Handle = locking.NewHandle(l, lockKey, token, fence, r.TTL, nil)
	return ans, false, nil
}

// InitMarks creates the mark of every key that has none at the table's
// clock, and leaves existing marks alone. It checks every key before it
// creates any.
func (l *Locker) InitMarks(ctx context.Context, keys []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/memory: init marks: %w", err)
	}
	if l.closed.Load() {
		return fmt.Errorf("locking/memory: init marks: %w", locking.ErrClosed)
	}
	for _, k := range keys {
		if err := locking.CheckKey(k); err != nil {
			return fmt.Errorf("locking/memory: init marks: %w", err)
		}
	}
	var per [numShards]int
	for _, k := range keys {
		i := l.tab.shardIndex(k)
		per[i]++
		s := &l.tab.shards[i]
		s.mu.Lock()
		if _, ok := s.marks[k]; !ok {
			s.marks[k], _ = l.tab.now()
		}
		s.mu.Unlock()
	}
	// Each of these keys takes a lock when its tick comes, all at once
	// when they share a second: a lock table grown then, entry by entry,
	// was rehashed a dozen times in the middle of the burst. An empty one
	// is made at the size the keys need.
	for i, n := range per {
		s := &l.tab.shards[i]
		s.mu.Lock()
		if len(s.m) == 0 && n > 8 {
			s.m = make(map[string]entry, n)
		}
		s.mu.Unlock()
	}
	return nil
}

// SetPause sets key's pause flag; every try-lock-tick that starts after it
// returns reads it. The zero Pause (resumed) removes the flag.
func (l *Locker) SetPause(ctx context.Context, key string, p locking.Pause) error {
	if err := l.checkKey(ctx, "set pause", key); err != nil {
		return err
	}
	s := l.tab.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == (locking.Pause{}) {
		delete(s.pauses, key)
		return nil
	}
	s.pauses[key] = p
	return nil
}

// GetPause returns key's pause flag as SetPause stored it; the zero Pause
// when it has none.
func (l *Locker) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	if err := l.checkKey(ctx, "get pause", key); err != nil {
		return locking.Pause{}, err
	}
	s := l.tab.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pauses[key], nil
}

// checkKey does what the pause methods share: context, closed Locker, key.
func (l *Locker) checkKey(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/memory: %s %q: %w", op, key, err)
	}
	if l.closed.Load() {
		return fmt.Errorf("locking/memory: %s %q: %w", op, key, locking.ErrClosed)
	}
	if err := locking.CheckKey(key); err != nil {
		return fmt.Errorf("locking/memory: %s: %w", op, err)
	}
	return nil
}

// TryLockTicks is TryLockTick for each request in turn: answers[i] and
// errs[i] are its answer to reqs[i]. The memory backend has no round trip
// to save: the scheduler does not batch on it (InProcess), and the batch
// is here for callers that batch whatever the backend.
func (l *Locker) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) (answers []locking.TickAnswer, errs []error) {
	answers, errs = make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		answers[i], errs[i] = l.TryLockTick(ctx, r)
	}
	return answers, errs
}

// InProcess reports that the Locker decides in the caller's goroutine,
// with no round trip (locking.InProcessLocker): the scheduler then asks
// for each tick's lock on the tick's own worker instead of batching.
func (l *Locker) InProcess() bool { return true }
