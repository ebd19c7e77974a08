package memory

// ForgetMark deletes key's tick mark from l's table, as a store that lost
// its data would (lockertest's Backend.ForgetMark). Locks, fences and pause
// flags stay.
func (l *Locker) ForgetMark(key string) {
	s := l.tab.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.marks, key)
}
