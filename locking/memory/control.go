package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// controlTable holds the operators' acts (cluster.Control): actions by
// schedule, newest last, and the stop requests by id.
type controlTable struct {
	mu      sync.Mutex
	actions map[string][]cluster.Action
	stops   map[string]*stopEntry
}

type stopEntry struct {
	req     cluster.StopRequest
	expires time.Duration // on the table's elapsed clock
	acted   map[string][]cluster.Stopped
	seq     int
}

// RecordAction appends a to its schedule's actions, keeping keep.
func (l *Locker) RecordAction(ctx context.Context, a cluster.Action, keep int) error {
	if err := l.usable(ctx, "record action"); err != nil {
		return err
	}
	if err := cluster.CheckAction(a); err != nil {
		return fmt.Errorf("locking/memory: record action: %w", err)
	}
	if err := cluster.CheckKeep(keep); err != nil {
		return fmt.Errorf("locking/memory: record action: %w", err)
	}
	c := &l.tab.control
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.actions == nil {
		c.actions = map[string][]cluster.Action{}
	}
	as := append(c.actions[a.Schedule], cluster.BoundAction(a))
	if len(as) > keep {
		as = slices.Clone(as[len(as)-keep:])
	}
	c.actions[a.Schedule] = as
	return nil
}

// Actions returns up to limit actions of schedule, newest first.
func (l *Locker) Actions(ctx context.Context, schedule string, limit int) ([]cluster.Action, error) {
	if err := l.checkSchedule(ctx, "actions", schedule); err != nil {
		return nil, err
	}
	if err := cluster.CheckLimit(limit); err != nil {
		return nil, fmt.Errorf("locking/memory: actions: %w", err)
	}
	c := &l.tab.control
	c.mu.Lock()
	defer c.mu.Unlock()
	as := c.actions[schedule]
	out := make([]cluster.Action, 0, min(limit, len(as)))
	for i := len(as) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, as[i])
	}
	return out, nil
}

// RequestStop stores r until ttl from now; a resend (same id) is a no-op.
func (l *Locker) RequestStop(ctx context.Context, r cluster.StopRequest, ttl time.Duration) error {
	if err := l.usable(ctx, "request stop"); err != nil {
		return err
	}
	if err := cluster.CheckStop(r, ttl); err != nil {
		return fmt.Errorf("locking/memory: request stop: %w", err)
	}
	c := &l.tab.control
	c.mu.Lock()
	defer c.mu.Unlock()
	now := l.tab.elapsed()
	c.sweep(now)
	if c.stops == nil {
		c.stops = map[string]*stopEntry{}
	}
	if _, ok := c.stops[r.ID]; ok {
		return nil
	}
	r.Stopped, r.RunIDs = nil, slices.Clone(r.RunIDs)
	c.stops[r.ID] = &stopEntry{req: r, expires: expiry(now, ttl), acted: map[string][]cluster.Stopped{}, seq: len(c.stops)}
	return nil
}

// StopRequests returns the live stop requests, oldest first.
func (l *Locker) StopRequests(ctx context.Context) ([]cluster.StopRequest, error) {
	if err := l.usable(ctx, "stop requests"); err != nil {
		return nil, err
	}
	c := &l.tab.control
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(l.tab.elapsed())
	es := make([]*stopEntry, 0, len(c.stops))
	for _, e := range c.stops {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *stopEntry) int {
		return cmp.Or(a.req.At.Compare(b.req.At), cmp.Compare(a.seq, b.seq))
	})
	out := make([]cluster.StopRequest, len(es))
	for i, e := range es {
		out[i] = e.req
		out[i].RunIDs = slices.Clone(e.req.RunIDs)
		out[i].Stopped = []cluster.Stopped{}
		for _, node := range slices.Sorted(maps.Keys(e.acted)) {
			out[i].Stopped = append(out[i].Stopped, e.acted[node]...)
		}
	}
	return out, nil
}

// StopActed records what node stopped for request id.
func (l *Locker) StopActed(ctx context.Context, id, node string, stopped []cluster.Stopped) error {
	if err := l.usable(ctx, "stop acted"); err != nil {
		return err
	}
	if id == "" || node == "" {
		return fmt.Errorf("locking/memory: stop acted: %w: empty request id or node", cluster.ErrInvalid)
	}
	c := &l.tab.control
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(l.tab.elapsed())
	if e, ok := c.stops[id]; ok {
		e.acted[node] = slices.Clone(stopped)
		if e.acted[node] == nil {
			e.acted[node] = []cluster.Stopped{}
		}
	}
	return nil
}

// sweep drops the expired stop requests. Call with c.mu held.
func (c *controlTable) sweep(now time.Duration) {
	for id, e := range c.stops {
		if now >= e.expires {
			delete(c.stops, id)
		}
	}
}

// CancelQueue drops schedule's queue.
func (l *Locker) CancelQueue(ctx context.Context, schedule string) (int, error) {
	if err := l.checkSchedule(ctx, "cancel queue", schedule); err != nil {
		return 0, err
	}
	s := l.tab.shardFor(schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.queues[schedule])
	delete(s.queues, schedule)
	return n, nil
}
