package scheduler

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/mutation"
)

// Step 8's record of a run, for the cluster's history (DESIGN.md
// "Operating it"). The scheduler does not store it: an observer that wants
// it (a RunObserver) gets one record per run, after the run, and stores
// it off the tick's path (batched).

// RunRecord is one finished run, with everything history keeps of it.
type RunRecord struct {
	Schedule string
	Tick     time.Time
	Node     string
	Result   RunResult
	Start    time.Time
	Duration time.Duration
	Fence    int64
	Manual   bool
	Attempts int
	Err      error
	RunID    string
	// Output is the tail of the job's output (at most OutputTailSize
	// bytes), when the job wrote any to Tick.Output.
	Output string
	// Overrun: the run took longer than its expected runtime.
	Overrun bool
	// Anomaly is what history calls suspicious in the run's duration:
	// AnomalyOverrun (Overrun), AnomalyTooFast (a success under the
	// schedule's MinRuntime), or "".
	Anomaly string
	// By is who asked for a manual run (Manual.By); "" for a scheduled one.
	By string
	// TraceParent is the run's W3C traceparent when runs are traced
	// (Options.Tracer), so its pings and notifications join its trace.
	TraceParent string
}

// Anomalies of a RunRecord: the names history and the
// bext_scheduler_run_anomalies_total metric use.
const (
	AnomalyOverrun = "overrun"
	AnomalyTooFast = "too_fast"
)

// RunObserver is implemented by observers that keep run records. When the
// Observer implements it, every run's Tick.Output collects its output's
// tail.
type RunObserver interface {
	RunRecorded(r RunRecord)
}

// RunStart is a run about to start its first attempt.
type RunStart struct {
	Schedule string
	Tick     time.Time
	Node     string
	RunID    string
	Manual   bool
	// Start is the run's start: its RunRecord's Start is the same time,
	// so a record written now (the run's provisional record in history)
	// and the final one name one start.
	Start time.Time
	Fence int64  // the lock's fence; 0 for a node-local run
	By    string // who asked for a manual run (Manual.By); "" for a scheduled one
	// Lateness is how late after its tick the node handled it.
	Lateness time.Duration
	// TraceParent: as RunRecord's.
	TraceParent string
}

// RunStartObserver is implemented by observers that want to know when a
// run starts (a dead-man's switch's /start ping). It is called on the
// run's goroutine just before the job: it must not block.
type RunStartObserver interface {
	RunStarted(r RunStart)
}

// AttemptObserver is implemented by observers that want to know when a
// run retries: attempt (2 and up) of run runID starts (the node's
// announcement of what runs says which attempt). Called like RunStarted.
type AttemptObserver interface {
	AttemptStarted(runID string, attempt int)
}

// SkipRecord is a tick of a locked schedule that this node saw consumed
// without a run: the backend answered paused or missed (the mark raised to
// it), its lock was held by a run of the schedule (overlap), this node
// skipped it as still running, or this node's decision raised the mark
// over it while no node had asked for it (stopped). History keeps one
// record per tick, so that `audit` can tell a skipped tick from a lost
// one; several nodes may report the same tick.
type SkipRecord struct {
	Schedule string
	Tick     time.Time
	Node     string
	Reason   RecordReason
	At       time.Time // when this node decided it
}

// RecordReason is why a SkipRecord's tick did not run. The values are the
// skip reasons of `audit` (cluster.Skip's Reason, a contract).
type RecordReason string

// Record reasons.
const (
	RecordPaused  RecordReason = "paused"
	RecordMissed  RecordReason = "missed"
	RecordOverlap RecordReason = "overlap"
	RecordStopped RecordReason = "stopped"
	// RecordGroupFull: granted, its concurrency group was full (group.go).
	RecordGroupFull RecordReason = "group_full"
)

// SkipObserver is implemented by observers that keep skip records. It is
// called from the tick's path: it must not block.
type SkipObserver interface {
	SkipRecorded(r SkipRecord)
}

// maxGapRecords bounds the stopped ticks one decision records: a schedule
// every second whose nodes were all stopped for a day has 86,400, and
// history keeps the newest [history] keep of them anyway.
const maxGapRecords = 1000

// recordSkip sends a skip of t's schedule at tick to the SkipObserver.
func (s *Scheduler) recordSkip(t *tick, at time.Time, why RecordReason) {
	s.recordSkipOf(t.def, at, why)
}

// recordSkipOf is recordSkip for a schedule's definition def.
func (s *Scheduler) recordSkipOf(def *compiled, at time.Time, why RecordReason) {
	if s.skipObs == nil || !def.lock || mutation.On(mutation.NoSkipRecords) { // mutation (simmut tag only): no skip records
		return
	}
	s.skipObs.SkipRecorded(SkipRecord{Schedule: def.ID, Tick: at, Node: s.opts.NodeID, Reason: why, At: s.clock.Now()})
}

// recordGap records as stopped the ticks of t's schedule strictly between
// before (the mark the backend's step found) and t's tick: the step raised
// the mark over them, and no node had asked for them (an ask would have
// raised the mark to it, or, answered contended, been recorded as an
// overlap). The newest maxGapRecords of them.
func (s *Scheduler) recordGap(t *tick, before time.Time) {
	if s.skipObs == nil || before.IsZero() || !before.Before(t.at) || t.def.Spec == nil {
		return
	}
	var gap []time.Time
	for at := t.def.Spec.Next(before); !at.IsZero() && at.Before(t.at); at = t.def.Spec.Next(at) {
		gap = append(gap, at)
		if len(gap) > 2*maxGapRecords {
			gap = append(gap[:0], gap[len(gap)-maxGapRecords:]...)
		}
	}
	if len(gap) > maxGapRecords {
		gap = gap[len(gap)-maxGapRecords:]
	}
	for _, at := range gap {
		s.recordSkip(t, at, RecordStopped)
	}
}

// OutputTailSize bounds the output a run record keeps.
const OutputTailSize = 4096

// recordRun sends f's run to the RunObserver, and remembers a success.
func (s *Scheduler) recordRun(t *tick, runID string, manual bool, out runOutcome, fence int64, tail *tailBuffer) {
	if out.result == ResultSuccess {
		t.st.lastSuccess.raise(t.at)
	}
	if s.runObs == nil && (t.trace == nil || t.trace.span == nil) {
		return
	}
	r := RunRecord{
		Schedule: t.def.ID, Tick: t.at, Node: s.opts.NodeID, Result: out.result,
		Start: out.start, Duration: out.dur, Fence: fence, Manual: manual,
		Attempts: out.attempts, Err: out.err, RunID: runID, Overrun: out.overrun,
		Anomaly: anomaly(t.def, out), By: t.by(),
	}
	if tail != nil {
		r.Output = tail.String()
	}
	if t.trace != nil {
		s.traceEnd(t, &r)
	}
	if s.runObs == nil {
		return
	}
	if mutation.On(mutation.NoHistory) && out.result != ResultSuccess { // mutation (simmut tag only): only successes recorded
		return
	}
	s.runObs.RunRecorded(r)
}

// anomaly is the node's verdict on a run's duration, for its record: an
// overrun (any attempt past expected_runtime), else a success faster than
// the schedule's min_runtime, else none. A run that did not start has no
// duration to judge.
func anomaly(def *compiled, out runOutcome) string {
	switch {
	case out.unstarted:
		return ""
	case out.overrun:
		return AnomalyOverrun
	case out.result == ResultSuccess && def.MinRuntime > 0 && out.dur < def.MinRuntime:
		return AnomalyTooFast
	}
	return ""
}

// newRunID returns a fresh run id: 128 random bits, hex. A run id must be
// unique (an HTTP job's Idempotency-Key, a dead-man's switch's ping), not
// secret: the bits come from math/rand/v2's runtime source (ChaCha8 per
// thread, seeded from the OS), which costs no system call or lock, where
// crypto/rand, one call per tick, was a few percent of a burst.
func newRunID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	var out [32]byte
	hex.Encode(out[:], b[:])
	return string(out[:])
}

// tailBuffer keeps the last OutputTailSize bytes written to it. Jobs may
// write from several goroutines (stdout and stderr pumps).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func newTailBuffer() *tailBuffer { return &tailBuffer{} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if n >= OutputTailSize {
		b.buf = append(b.buf[:0], p[n-OutputTailSize:]...)
		return n, nil
	}
	if over := len(b.buf) + n - OutputTailSize; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
