package scheduler

import (
	"context"
	"time"
)

// Tick is what a job learns about the tick it runs for.
type Tick struct {
	ScheduleID string    // the schedule's id (also its lock key)
	Time       time.Time // the scheduled fire time, not the start time
	NodeID     string    // the node running it
	LockKey    string    // the cluster-wide lock key; "" when run node-local
	// FencingToken is the lock's fencing token, 0 when run node-local. A job
	// that writes to a shared resource should pass it along so the resource
	// can refuse writes from a stale holder. It never decreases for a key;
	// consecutive ticks run by one node under one continuously held lock
	// share the same token.
	FencingToken int64
}

// Locked reports whether the tick runs under a cluster-wide lock.
func (t Tick) Locked() bool { return t.LockKey != "" }

// Job is anything the scheduler can run. Run must return when ctx is
// cancelled (timeout, lost lock, shutdown).
type Job interface {
	Run(ctx context.Context, t Tick) error
}

// JobFunc adapts a plain function to Job, for programs that embed the
// scheduler as a library.
type JobFunc func(ctx context.Context, t Tick) error

// Run calls f.
func (f JobFunc) Run(ctx context.Context, t Tick) error { return f(ctx, t) }
