package scheduler_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

type runCtxKey struct{}

// valueJob reports the value of runCtxKey its context carries, then
// blocks as blockingJob does.
type valueJob struct {
	*blockingJob
	value chan any
}

func (j valueJob) Run(ctx context.Context, t scheduler.Tick) error {
	j.value <- ctx.Value(runCtxKey{})
	return j.blockingJob.Run(ctx, t)
}

// A job's context carries the values of the context given to Run (the
// run's context is no longer a child of a cancellable parent: runSet),
// is not ended by the end of Run's context (the grace), and is ended by
// the end of the grace with a cause read as cancelled.
func TestJobContextCarriesRunValues(t *testing.T) {
	job := valueJob{newBlockingJob(), make(chan any, 1)}
	s := sched("v", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour
	h := newHarness(t, scheduler.Options{ShutdownGrace: time.Hour}, s)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), runCtxKey{}, "from Run"))
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.s.Run(ctx) }()
	t.Cleanup(func() { h.stop() })
	h.idle()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	if v := <-job.value; v != "from Run" {
		t.Errorf("job's ctx.Value = %v, want the value of Run's context", v)
	}
	h.cancel()
	h.logs.waitFor(t, slog.LevelInfo, "shutting down")
	select {
	case c := <-job.ended:
		t.Fatalf("job ended (cause %v) when Run's context ended, before the grace did", c)
	default:
	}
	h.s.EndGrace()
	if cause := job.waitEnded(t); cause == nil {
		t.Fatal("job not cancelled by the end of the grace")
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	h.cancel = nil
	if r := h.rec.waitRuns(t, 1); r[0].result != scheduler.ResultCancelled {
		t.Errorf("result %q, want cancelled", r[0].result)
	}
}
