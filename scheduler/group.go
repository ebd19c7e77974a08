package scheduler

import (
	"context"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Concurrency groups (DESIGN.md "Concurrency groups"). A granted tick of
// a grouped schedule takes one of its group's GroupMax slots
// (locking.TryLockSlot) before its job starts, under the same TTL as its
// lock; the run's watch renews both (renewHeld), and the slot is released
// when the job has returned, before the lock. So at most GroupMax runs of
// the group's schedules hold a slot at once in the cluster, and a node
// that dies frees its slot with its lease, as it frees its lock.

// slotRetry is how often a tick waiting for a slot (group_wait) tries
// again. Slots are freed by releases this node does not hear of, so the
// wait polls; a second keeps a full group's cost at GroupMax tries per
// waiting tick per second.
const slotRetry = time.Second

// takeSlot takes a slot of locked tick t's group into t.lease.slot. It
// reports the skip when it took none: SkipGroupFull when every slot is
// held (and the tick does not wait, or its window ended, or the node
// began to stop, while it waited), and SkipBackendError when the backend
// did not answer or the tick's lock was lost while it waited.
func (s *Scheduler) takeSlot(t *tick) (SkipReason, bool) {
	l := &t.lease
	h, why := s.trySlot(t, l, func() waitEnd {
		// Wait holding the tick's lock (renewed when due), as a retry's
		// backoff does.
		if s.waitHoldingLock(t, l, slotRetry, nil) {
			return waitDone
		}
		if s.stoppingNow() {
			return waitStopping
		}
		return waitLost
	})
	if h == nil {
		return why, false
	}
	l.slot = h
	// After a wait the lease is old: renewed now (lock and slot), so that
	// the run's watch, which counts its first renewal from the job's start,
	// does not meet the lease deadline first.
	if s.renewalDue(l) {
		if err := s.renewLease(l); err != nil {
			l.slot = nil
			s.release(t.def.ID, h, "the group slot: the lock was lost while waiting for it")
			return SkipBackendError, false
		}
	}
	return "", true
}

// renewalDue reports whether l's last renewal (or acquisition) is a
// renewal period old.
func (s *Scheduler) renewalDue(l *lease) bool { return s.untilRenewal(l) <= 0 }

// takeLocalSlot takes a slot of node-local tick t's group, which holds
// no lock: the slot is its run's only lease (nil and the skip when none).
func (s *Scheduler) takeLocalSlot(t *tick) (*locking.Handle, SkipReason) {
	return s.trySlot(t, nil, func() waitEnd {
		tm := s.clock.NewTimer(slotRetry)
		defer tm.Stop()
		select {
		case <-tm.C():
			return waitDone
		case <-s.stopCh:
			return waitStopping
		}
	})
}

// waitEnd is how a wait for a slot ended.
type waitEnd uint8

const (
	waitDone     waitEnd = iota // waited: try again
	waitStopping                // the node is stopping
	waitLost                    // the tick's lock was lost meanwhile
)

// trySlot is the loop of takeSlot and takeLocalSlot: try every slot once,
// and while the group is full and the tick may wait, wait and try again.
// held bounds each try by what is left of the tick's lease (nil: a
// node-local tick, bounded by the release timeout).
func (s *Scheduler) trySlot(t *tick, held *lease, wait func() waitEnd) (*locking.Handle, SkipReason) {
	def := t.def
	first := slotStart(s.opts.NodeID, def.ID, t.at, def.GroupMax)
	end := t.at.Add(max(t.window(s), s.opts.MaxClockSkew))
	for {
		var ctx context.Context
		var cancel context.CancelFunc
		if held != nil {
			ctx, cancel = s.renewCtx(held, max(held.until.Sub(s.leaseNow()), 0))
		} else {
			ctx, cancel = context.WithTimeout(s.jobCtx, releaseTimeout)
		}
		h, _, err := locking.TryLockSlot(ctx, s.opts.Locker.(locking.TryLocker), def.Group, def.GroupMax, first, def.ttl)
		cancel()
		switch {
		case err != nil:
			s.log.Warn("taking a slot of the concurrency group failed: tick skipped", slog.String("schedule", def.ID),
				slog.String("group", def.Group), slog.String("tick", t.at.Format(time.RFC3339)), slog.Any("error", err))
			return nil, SkipBackendError
		case h != nil:
			return h, ""
		case !def.GroupWait || !s.clock.Now().Add(slotRetry).Before(end):
			s.log.Info("concurrency group full: tick skipped", slog.String("schedule", def.ID),
				slog.String("group", def.Group), slog.Int("max_running", def.GroupMax), slog.String("tick", t.at.Format(time.RFC3339)))
			return nil, SkipGroupFull
		}
		switch wait() {
		case waitStopping:
			return nil, SkipGroupFull // it never had a slot
		case waitLost:
			return nil, SkipBackendError
		}
	}
}

// releaseSlot releases t's group slot, if it holds one, once its job has
// returned.
func (s *Scheduler) releaseSlot(t *tick) {
	if h := t.lease.slot; h != nil {
		t.lease.slot = nil
		s.release(t.def.ID, h, "the group slot, after the run")
	}
}

// slotStart is the slot a node tries first for a tick: spread by node,
// schedule and tick, so that the group's runs do not all start by asking
// for slot 0.
func slotStart(node, id string, at time.Time, k int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte(at.UTC().Format(time.RFC3339Nano)))
	return int(h.Sum32() % uint32(k))
}

// canTryLock reports whether l takes plain locks, as a group's slots are
// (every backend does; a test's wrapper may not).
func canTryLock(l Locker) bool {
	_, ok := l.(locking.TryLocker)
	return ok
}

// manualSlot takes a slot of t's group for manual run t under lock l,
// once, without waiting: a full group (or a backend that did not answer)
// reports false, and the manual run goes back to its queue. true when the
// schedule has no group.
func (s *Scheduler) manualSlot(t *tick, l *lease) bool {
	def := t.def
	if def.Group == "" || l == nil {
		return true
	}
	ctx, cancel := s.renewCtx(l, max(l.until.Sub(s.leaseNow()), 0))
	defer cancel()
	h, _, err := locking.TryLockSlot(ctx, s.opts.Locker.(locking.TryLocker), def.Group, def.GroupMax,
		slotStart(s.opts.NodeID, def.ID, t.at, def.GroupMax), def.ttl)
	if err != nil || h == nil {
		s.log.Info("manual run waits: no slot of its concurrency group", slog.String("schedule", def.ID),
			slog.String("group", def.Group), slog.Any("error", err))
		return false
	}
	l.slot = h
	return true
}
