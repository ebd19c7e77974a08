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
}

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
	Start    time.Time
}

// RunStartObserver is implemented by observers that want to know when a
// run starts (a dead-man's switch's /start ping). It is called on the
// run's goroutine just before the job: it must not block.
type RunStartObserver interface {
	RunStarted(r RunStart)
}

// OutputTailSize bounds the output a run record keeps.
const OutputTailSize = 4096

// recordRun sends f's run to the RunObserver, and remembers a success.
func (s *Scheduler) recordRun(t *tick, runID string, manual bool, out runOutcome, fence int64, tail *tailBuffer) {
	if out.result == ResultSuccess {
		t.st.lastSuccess.raise(t.at)
	}
	if s.runObs == nil {
		return
	}
	if mutation.On(mutation.NoHistory) && out.result != ResultSuccess { // mutation (simmut tag only): only successes recorded
		return
	}
	r := RunRecord{
		Schedule: t.def.ID, Tick: t.at, Node: s.opts.NodeID, Result: out.result,
		Start: out.start, Duration: out.dur, Fence: fence, Manual: manual,
		Attempts: out.attempts, Err: out.err, RunID: runID, Overrun: out.overrun,
	}
	if tail != nil {
		r.Output = tail.String()
	}
	s.runObs.RunRecorded(r)
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
