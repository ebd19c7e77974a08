package memory

import (
	"context"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

var _ locking.MarkReader = (*Locker)(nil)

// Mark returns key's tick mark as try-lock-tick and InitMarks stored it.
func (l *Locker) Mark(ctx context.Context, key string) (time.Time, bool, error) {
	if err := l.checkKey(ctx, "mark", key); err != nil {
		return time.Time{}, false, err
	}
	s := l.tab.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.marks[key]
	return m, ok, nil
}
