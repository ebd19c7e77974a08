package memory

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/bext-dev/bext-scheduler/locking"
)

var _ locking.TickWatcher = (*Locker)(nil)

// watchers are the watches of one table: every Locker sharing it (its
// peers, the nodes of an in-process cluster) hears every raised mark.
type watchers struct {
	// n counts the watches, read without mu: a try-lock-tick with none to
	// tell does not take the table-wide mutex. A watch is counted before
	// Listening is called, so a mark raised after that is always told.
	n    atomic.Int32
	mu   sync.Mutex
	next int
	m    map[int]locking.TickWatch
}

// WatchTicks reports every mark a try-lock-tick on this table raises, on
// the goroutine of that try-lock-tick, until ctx ends (locking.TickWatcher).
// Nothing is lost in one process: a mark raised after Listening was called
// is always reported.
func (l *Locker) WatchTicks(ctx context.Context, w locking.TickWatch) error {
	if l.closed.Load() {
		return fmt.Errorf("locking/memory: watch ticks: %w", locking.ErrClosed)
	}
	ws := &l.tab.watches
	ws.mu.Lock()
	if ws.m == nil {
		ws.m = make(map[int]locking.TickWatch)
	}
	id := ws.next
	ws.next++
	ws.m[id] = w
	ws.n.Add(1)
	ws.mu.Unlock()
	if w.Listening != nil {
		w.Listening()
	}
	<-ctx.Done()
	ws.mu.Lock()
	delete(ws.m, id)
	ws.n.Add(-1)
	ws.mu.Unlock()
	return nil
}

// publish tells every watch that m was raised. The watches' callbacks do
// not block (the contract), so they are called under the mutex: a watch
// that has returned from WatchTicks is never called again.
func (ws *watchers) publish(m locking.TickMark) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.m {
		if w.Mark != nil {
			w.Mark(m)
		}
	}
}
