package memory

import "time"

// Fault injection, for tests only: the simulation (internal/sim) makes the
// table lose state as a store that restarted without persistence (a Redis
// with no AOF or RDB) or was restored from an old snapshot would, to check
// that what the lock contract promises then still holds: fences keep
// increasing (their clock floor), and a tick run twice across the loss
// runs under a higher fence. Nothing in the scheduler, the service or the
// binary calls these; they change nothing for a table no one calls them
// on.

// ForgetMarks deletes the tick marks of keys, or every mark when keys is
// empty. Locks, fences and pause flags stay.
func (l *Locker) ForgetMarks(keys ...string) {
	l.eachMark(keys, func(s *shard, k string) { delete(s.marks, k) })
}

// RewindMarks sets the tick marks of keys (every mark when keys is empty)
// back by d, as a snapshot d old would have them. Missing marks stay
// missing.
func (l *Locker) RewindMarks(d time.Duration, keys ...string) {
	l.eachMark(keys, func(s *shard, k string) {
		if m, ok := s.marks[k]; ok {
			s.marks[k] = m.Add(-d)
		}
	})
}

// ForgetFences sets every shard's fencing counter back to zero: the next
// fence is the clock floor alone (nextFence).
func (l *Locker) ForgetFences() {
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		s.fence = 0
		s.mu.Unlock()
	}
}

// DropLocks deletes every lock of the table, held or not: their holders'
// renewals and releases then fail with locking.ErrLockLost. The grants'
// records (shard.grants) go with them: a store that lost its locks lost
// the records kept beside them, and a resend then finds neither.
func (l *Locker) DropLocks() {
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.grants = nil
		s.mu.Unlock()
	}
}

// eachMark calls f on every key of keys (every key with a mark when keys
// is empty) under its shard's mutex.
func (l *Locker) eachMark(keys []string, f func(s *shard, k string)) {
	if len(keys) == 0 {
		for i := range l.tab.shards {
			s := &l.tab.shards[i]
			s.mu.Lock()
			for k := range s.marks {
				f(s, k)
			}
			s.mu.Unlock()
		}
		return
	}
	for _, k := range keys {
		s := l.tab.shardFor(k)
		s.mu.Lock()
		f(s, k)
		s.mu.Unlock()
	}
}
