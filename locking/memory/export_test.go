package memory

import "time"

// ForgetMark deletes key's tick mark from l's table, as a store that lost
// its data would (lockertest's Backend.ForgetMark). Locks, fences and pause
// flags stay.
func (l *Locker) ForgetMark(key string) {
	s := l.tab.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.marks, key)
}

// EndLease makes the lock on lockKey in l's table end d from now, as if
// taken its TTL minus d ago (lockertest's Backend.EndLease).
func (l *Locker) EndLease(lockKey string, d time.Duration) {
	s := l.tab.shardFor(lockKey)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[lockKey]; ok {
		_, now := l.tab.now()
		e.expires = now + d
		s.m[lockKey] = e
	}
}
