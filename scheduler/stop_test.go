package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// stoppableJob fails its first failures attempts at once, then blocks until
// its context ends and returns its cause.
type stoppableJob struct {
	failingJob
}

func (j *stoppableJob) Run(ctx context.Context, t scheduler.Tick) error {
	j.mu.Lock()
	fail := j.failures > 0
	if fail {
		j.failures--
	}
	j.ticks = append(j.ticks, t)
	j.mu.Unlock()
	j.broadcast()
	if fail {
		return errors.New("boom")
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

func (j *stoppableJob) runID() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ticks[0].RunID
}

// StopRun cancels a running job: the run is recorded cancelled after one
// attempt, though the schedule has retries left, and the job saw its
// context end.
func TestStopRunCancelsTheJob(t *testing.T) {
	t.Parallel()
	job := &stoppableJob{}
	h, recs := retryHarness(t, job, 3, 10*time.Second)
	h.clock.Advance(time.Minute)
	waitAttempts(t, &job.failingJob, 1)
	if !h.s.StopRun(job.runID()) {
		t.Fatal("StopRun of the running job = false, want true")
	}
	r := recs.waitRecs(t, 1)[0]
	if r.Result != scheduler.ResultCancelled || r.Attempts != 1 || r.RunID != job.runID() {
		t.Fatalf("record %+v: want one cancelled attempt of run %s", r, job.runID())
	}
}

// StopRun of a run waiting for its retry ends it at once, cancelled: no
// further attempt, without waiting out the (hour-long) backoff.
func TestStopRunDuringBackoff(t *testing.T) {
	t.Parallel()
	job := &stoppableJob{failingJob: failingJob{failures: 100}}
	h, recs := retryHarness(t, job, 5, time.Hour)
	h.clock.Advance(time.Minute)
	waitAttempts(t, &job.failingJob, 1)
	h.s.StopRun(job.runID())
	r := recs.waitRecs(t, 1)[0]
	if r.Result != scheduler.ResultCancelled || r.Attempts != 1 {
		t.Fatalf("record %+v: want cancelled after its one attempt", r)
	}
	job.mu.Lock()
	defer job.mu.Unlock()
	if len(job.ticks) != 1 {
		t.Fatalf("%d attempts, want 1: a stopped run retried", len(job.ticks))
	}
}

// StopRun of a run id this node does not run finds nothing.
func TestStopRunUnknown(t *testing.T) {
	t.Parallel()
	h, _ := retryHarness(t, &failingJob{}, 0, time.Second)
	if h.s.StopRun("no-such-run") || h.s.StopRun("") {
		t.Fatal("StopRun of an unknown run = true, want false")
	}
}
