package scheduler

import (
	"context"
	"io"
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
	// every run has a token of its own (the lock is taken afresh for each).
	FencingToken int64
	// RunID is unique per run and the same across its retries
	// (BEXT_RUN_ID; an HTTP job's Idempotency-Key).
	RunID string
	// Attempt is 1 for the first attempt, 2 for the first retry, …
	Attempt int
	// Manual is true for a run asked for by trigger or backfill.
	Manual bool
	// PrevTime is the schedule's tick before Time (zero when none lies
	// within a reasonable look-back).
	PrevTime time.Time
	// LastSuccessTime is the tick of the last successful run this node
	// knows of (its own, or the cluster's last run when it started);
	// zero when none.
	LastSuccessTime time.Time
	// Output, when set, receives the job's output so the run's history
	// can keep its tail. Jobs that produce output write it there as well
	// as to their log; nil when nobody keeps it.
	Output io.Writer
	// TraceParent is the W3C traceparent of the run's span, when runs
	// are traced (Options.Tracer): an HTTP job sends it as the
	// traceparent header, a command gets it as TRACEPARENT. "" otherwise.
	TraceParent string
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
