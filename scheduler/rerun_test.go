package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A re-run (on_node_loss = "rerun": internal/agent hands it over as a
// manual run carrying Rerun) is the lost run's next attempt: the job sees
// the lost run's tick and run id, attempt 2 (BEXT_ATTEMPT), not manual;
// its record is the lost run's (its start, its run id), of attempts 2, not
// manual, so that it replaces the provisional record; a failure retries
// as attempt 3 under the schedule's retries.
func TestRerunIsTheLostRunsNextAttempt(t *testing.T) {
	job := &failingJob{failures: 1}
	s := sched("r", "0 3 * * *", hints.RequireGlobal, job)
	s.Retries, s.RetryBackoff = 1, time.Second
	h := newHarness(t, scheduler.Options{}, s)
	recs := &runRecs{recorder: h.rec}
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: h.locker, Backend: hints.Distributed,
		Observer: recs, NodeID: "node-a"}, s)
	h.start()
	lk, err := h.mem.TryLock(context.Background(), "r", time.Minute)
	if err != nil || lk == nil {
		t.Fatal(lk, err)
	}
	tick, lostStart := t0.Add(-time.Hour), t0.Add(-time.Hour+time.Second)
	if err := h.s.RunManual(scheduler.Manual{ID: "r", Tick: tick, RunID: "lost-1", Handle: lk, Sent: h.clock.Now(),
		By: "rerun: node node-x was lost", Rerun: &scheduler.Rerun{Attempt: 2, Start: lostStart}}); err != nil {
		t.Fatal(err)
	}
	h.advanceWhenArmed(3, time.Second) // the loop's timer, the retry's backoff and its renewal
	rec := recs.waitRecs(t, 1)[0]
	job.mu.Lock()
	got := append([]scheduler.Tick(nil), job.ticks...)
	job.mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d attempts, want 2 (the re-run and its retry); record %+v", len(got), rec)
	}
	for i, tk := range got {
		if tk.Attempt != i+2 || tk.RunID != "lost-1" || !tk.Time.Equal(tick) || tk.Manual {
			t.Errorf("attempt %d saw %+v: want attempt %d of run lost-1 at the lost tick, not manual", i, tk, i+2)
		}
	}
	if rec.Result != scheduler.ResultSuccess || rec.RunID != "lost-1" || rec.Attempts != 3 || rec.Manual ||
		!rec.Start.Equal(lostStart) || !rec.Tick.Equal(tick) {
		t.Errorf("record %+v: want lost-1's, success after attempt 3, not manual, from the lost run's start", rec)
	}
}
