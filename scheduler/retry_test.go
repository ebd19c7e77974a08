package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/jobs"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// runRecs is a recorder that also keeps run records (a RunObserver).
type runRecs struct {
	*recorder
	mu   sync.Mutex
	recs []scheduler.RunRecord
}

func (r *runRecs) RunRecorded(rec scheduler.RunRecord) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	r.broadcast()
}

func (r *runRecs) waitRecs(t testing.TB, n int) []scheduler.RunRecord {
	t.Helper()
	r.wait(t, fmt.Sprintf("%d run records", n), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.recs) >= n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]scheduler.RunRecord(nil), r.recs...)
}

// failingJob fails its first n attempts, then succeeds; it writes a line
// of output per attempt.
type failingJob struct {
	cond
	mu       sync.Mutex
	failures int
	ticks    []scheduler.Tick
}

func (j *failingJob) Run(_ context.Context, t scheduler.Tick) error {
	defer j.broadcast()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ticks = append(j.ticks, t)
	if t.Output != nil {
		fmt.Fprintf(t.Output, "attempt %d\n", t.Attempt)
	}
	if j.failures > 0 {
		j.failures--
		return errors.New("boom")
	}
	return nil
}

func retryHarness(t *testing.T, job scheduler.Job, retries int, backoff time.Duration) (*harness, *runRecs) {
	s := sched("r", everyMinute, hints.RequireGlobal, job)
	s.Retries, s.RetryBackoff = retries, backoff
	s.ExpectedRuntime = time.Minute
	h := newHarness(t, scheduler.Options{}, s)
	recs := &runRecs{recorder: h.rec}
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: h.locker, Backend: hints.Distributed,
		Observer: recs, NodeID: "node-a"}, s)
	return h.start(), recs
}

// A job failing twice then succeeding is one success with 2 retries, all
// attempts under one lock and one run id.
func TestRetriesWithinTheTick(t *testing.T) {
	job := &failingJob{failures: 2}
	h, recs := retryHarness(t, job, 3, 10*time.Second)
	h.clock.Advance(time.Minute)
	waitAttempts(t, job, 1)
	h.advanceWhenArmed(3, 10*time.Second) // the loop's timer, the backoff and its renewal
	waitAttempts(t, job, 2)
	h.advanceWhenArmed(3, 20*time.Second) // the second backoff, doubled
	r := recs.waitRecs(t, 1)[0]
	if r.Result != scheduler.ResultSuccess || r.Attempts != 3 {
		t.Fatalf("record %+v: want one success after 3 attempts", r)
	}
	job.mu.Lock()
	defer job.mu.Unlock()
	for i, tk := range job.ticks {
		if tk.Attempt != i+1 || tk.RunID != r.RunID || tk.FencingToken != r.Fence {
			t.Errorf("attempt %d: %+v; want attempt %d, run id %s and fence %d", i, tk, i+1, r.RunID, r.Fence)
		}
	}
	if r.Output != "attempt 1\nattempt 2\nattempt 3\n" {
		t.Errorf("output tail %q", r.Output)
	}
	if runs := h.rec.waitRuns(t, 1); len(runs) != 1 {
		t.Errorf("%d runs reported, want 1 (retries are one run)", len(runs))
	}
}

func waitAttempts(t *testing.T, job *failingJob, n int) {
	t.Helper()
	job.wait(t, fmt.Sprintf("%d attempts", n), func() bool {
		job.mu.Lock()
		defer job.mu.Unlock()
		return len(job.ticks) >= n
	})
}

// A job that keeps failing is one failure with retries+1 attempts.
func TestRetriesExhausted(t *testing.T) {
	job := &failingJob{failures: 100}
	h, recs := retryHarness(t, job, 2, 10*time.Second)
	h.clock.Advance(time.Minute)
	waitAttempts(t, job, 1)
	h.advanceWhenArmed(3, 10*time.Second)
	waitAttempts(t, job, 2)
	h.advanceWhenArmed(3, 20*time.Second)
	r := recs.waitRecs(t, 1)[0]
	if r.Result != scheduler.ResultFailure || r.Attempts != 3 || r.Err == nil {
		t.Fatalf("record %+v: want a failure after retries+1 = 3 attempts", r)
	}
}

// A lock lost during the backoff stops the retries.
func TestLockLostDuringBackoffStopsRetries(t *testing.T) {
	job := &failingJob{failures: 100}
	h, recs := retryHarness(t, job, 5, 30*time.Second) // longer than the 20s renewal period
	h.clock.Advance(time.Minute)
	waitAttempts(t, job, 1)
	h.locker.mu.Lock()
	h.locker.loseNext = true
	h.locker.mu.Unlock()
	h.advanceWhenArmed(3, 20*time.Second) // the renewal during the backoff finds the lock gone
	r := recs.waitRecs(t, 1)[0]
	job.mu.Lock()
	n := len(job.ticks)
	job.mu.Unlock()
	if n != 1 || r.Attempts != 1 {
		t.Fatalf("%d attempts (record %+v) after the lock was lost in the backoff, want 1", n, r)
	}
}

// A manual run runs under the lock its caller took, is recorded as
// manual, releases the lock, and moves no tick mark.
func TestManualRun(t *testing.T) {
	job := &countingJob{}
	s := sched("m", "0 3 * * *", hints.RequireGlobal, job)
	h := newHarness(t, scheduler.Options{}, s)
	recs := &runRecs{recorder: h.rec}
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: h.locker, Backend: hints.Distributed,
		Observer: recs, NodeID: "node-a"}, s)
	h.start()
	lk, err := h.mem.TryLock(context.Background(), "m", time.Minute)
	if err != nil || lk == nil {
		t.Fatal(lk, err)
	}
	done := make(chan scheduler.RunResult, 1)
	if err := h.s.RunManual(scheduler.Manual{ID: "m", Tick: h.clock.Now(), RunID: "req-1", Handle: lk,
		Sent: h.clock.Now(), Done: func(r scheduler.RunResult) { done <- r }}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r != scheduler.ResultSuccess {
		t.Fatalf("manual run ended %q", r)
	}
	rec := recs.waitRecs(t, 1)[0]
	if !rec.Manual || rec.RunID != "req-1" || rec.Fence != lk.Fence() {
		t.Errorf("record %+v: want manual, run id req-1, the lock's fence", rec)
	}
	h.idle()
	if who := h.heldBy("m"); who != "" {
		t.Errorf("the lock is held by %q after the manual run", who)
	}
	// The regular tick still runs: no mark moved.
	h.step(3 * time.Hour)
	if got := job.got(); len(got) != 2 || !got[1].Time.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("runs %+v, want the manual run and then the 03:00 tick", got)
	}
	if err := h.s.RunManual(scheduler.Manual{ID: "nope", Handle: lk}); !errors.Is(err, scheduler.ErrUnknownSchedule) {
		t.Errorf("RunManual of an unknown schedule = %v", err)
	}
}

// A paused node_local schedule skips as paused on every node.
func TestNodeLocalHonoursThePause(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("nl", everyMinute, hints.NodeLocal, job)).start()
	if err := h.mem.SetPause(context.Background(), "nl", locking.Pause{Paused: true}); err != nil {
		t.Fatal(err)
	}
	h.step(time.Minute)
	if n := len(job.got()); n != 0 {
		t.Fatalf("%d runs of a paused node_local schedule", n)
	}
	_, skips, _ := h.rec.snapshot()
	if len(skips) != 1 || skips[0].reason != scheduler.SkipPaused {
		t.Fatalf("skips %+v, want one paused", skips)
	}
}

// advanceWhenArmed waits until n timers are armed, then moves the clock.
func (h *harness) advanceWhenArmed(n int, d time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.clock.BlockUntilArmed(ctx, n); err != nil {
		h.t.Fatalf("%d timers never armed: %v", n, err)
	}
	h.clock.Advance(d)
}

// advanceWhenRenewed is advanceWhenArmed for a run whose renewals must
// all be answered: it also waits for the timers' functions it fired to
// return. A watch re-arms its timer before it renews (run.go, fire), so n
// armed timers do not say that the renewal the last step fired is over;
// a test that moved the clock on meanwhile, step after step, passed the
// lease deadline while that renewal had not even reached the backend (a
// lock_lost no real clock gives: TestGroupWaitOutlivesItsLease failed
// about 1 run in 100 so, in isolation as in the package step).
func (h *harness) advanceWhenRenewed(n int, d time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.clock.BlockUntilSettled(ctx, n); err != nil {
		h.t.Fatalf("%d timers never armed with their work done: %v", n, err)
	}
	h.clock.Advance(d)
}

// A manual run's lock is renewed once before its job starts, and the job
// runs only if that renewal succeeded: the renewal is the taker's word
// that it heard the take, without which a backend puts the trigger back
// on its queue once the lock is free (cluster.Store.TakeRequest). Here the
// take's lock lapsed before the run came to start (its trigger is back in
// the queue, another node's to run): the job must not start. Before the
// renewal it started, on a lease counted from the take's send, while the
// trigger went back to the queue: run twice.
func TestManualRunConfirmsItsTakeBeforeStarting(t *testing.T) {
	job := &countingJob{}
	s := sched("m", "0 3 * * *", hints.RequireGlobal, job)
	h := newHarness(t, scheduler.Options{}, s)
	recs := &runRecs{recorder: h.rec}
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: h.locker, Backend: hints.Distributed,
		Observer: recs, NodeID: "node-a"}, s)
	h.start()
	lk, err := h.mem.TryLock(context.Background(), "m", time.Minute)
	if err != nil || lk == nil {
		t.Fatal(lk, err)
	}
	// The lock is gone (released here: to the backend, as if it lapsed)
	// though the lease counted from Sent is not over.
	if err := h.mem.Release(context.Background(), lk); err != nil {
		t.Fatal(err)
	}
	done := make(chan scheduler.RunResult, 1)
	if err := h.s.RunManual(scheduler.Manual{ID: "m", Tick: h.clock.Now(), RunID: "req-1", Handle: lk,
		Sent: h.clock.Now(), Done: func(r scheduler.RunResult) { done <- r }}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r != scheduler.ResultLockLost {
		t.Fatalf("manual run on a lost lock ended %q, want lock_lost", r)
	}
	h.idle()
	if got := job.got(); len(got) != 0 {
		t.Fatalf("the job ran %d times on a take whose lock was lost before it started, want 0", len(got))
	}
	if rec := recs.waitRecs(t, 1)[0]; !rec.Manual || rec.RunID != "req-1" || rec.Result != scheduler.ResultLockLost {
		t.Errorf("record %+v: want manual, run id req-1, lock_lost", rec)
	}
}

// A manual run whose confirming renewal failed gives its take back
// (Manual.GiveBack) instead of releasing the lock, and without Done: the
// renewal may have been applied with its reply lost, which the backend
// counts as the node's word that it heard the take, and a release is that
// word too; given back, the trigger goes back to its queue whichever way
// it went. Done would take a backfilled tick off its queue before the
// give-back could leave it there (lost, a lock_lost record its only
// trace). A run that started does not give its take back.
func TestManualRunUnconfirmedGivesItsTakeBack(t *testing.T) {
	job := &countingJob{}
	s := sched("m", "0 3 * * *", hints.RequireGlobal, job)
	h := newHarness(t, scheduler.Options{}, s)
	recs := &runRecs{recorder: h.rec}
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: h.locker, Backend: hints.Distributed, NodeID: "node-a", Observer: recs}, s)
	h.start()
	lk, err := h.mem.TryLock(context.Background(), "m", time.Minute)
	if err != nil || lk == nil {
		t.Fatal(lk, err)
	}
	if err := h.mem.Release(context.Background(), lk); err != nil {
		t.Fatal(err)
	}
	var given, doneCalls atomic.Int32
	if err := h.s.RunManual(scheduler.Manual{ID: "m", Tick: h.clock.Now(), RunID: "req-1", Handle: lk,
		Sent: h.clock.Now(), GiveBack: func() { given.Add(1) },
		Done: func(scheduler.RunResult) { doneCalls.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	if rec := recs.waitRecs(t, 1)[0]; rec.RunID != "req-1" || rec.Result != scheduler.ResultLockLost {
		t.Fatalf("record %+v: want req-1, lock_lost", rec)
	}
	h.idle()
	if n := given.Load(); n != 1 {
		t.Fatalf("an unconfirmed manual run gave its take back %d times, want once", n)
	}
	if n := doneCalls.Load(); n != 0 {
		t.Fatalf("Done called %d times for a run given back, want none (it would take a backfilled tick off its queue)", n)
	}

	lk2, err := h.mem.TryLock(context.Background(), "m", time.Minute)
	if err != nil || lk2 == nil {
		t.Fatal(lk2, err)
	}
	done2 := make(chan scheduler.RunResult, 1)
	if err := h.s.RunManual(scheduler.Manual{ID: "m", Tick: h.clock.Now(), RunID: "req-2", Handle: lk2,
		Sent: h.clock.Now(), GiveBack: func() { given.Add(1) }, Done: func(r scheduler.RunResult) { done2 <- r }}); err != nil {
		t.Fatal(err)
	}
	if r := <-done2; r != scheduler.ResultSuccess {
		t.Fatalf("manual run ended %q, want success", r)
	}
	h.idle()
	if n := given.Load(); n != 1 {
		t.Fatalf("a run that started gave its take back (%d give-backs in all), want none", n-1)
	}
	if held, err := h.mem.Held(context.Background(), "m"); err != nil || held {
		t.Fatalf("Held(m) after the run = %v, %v; want released", held, err)
	}
}

// A real command that fails, then succeeds on its retry, is one run: its
// record starts when the first attempt did and lasts until the second
// ended, the backoff between them included (not the last attempt's start
// and its own few hundred milliseconds). The first attempt stamps a file
// as it starts: the record's start is no later, and its end no earlier
// than that stamp plus both attempts' sleeps and the backoff.
func TestRetriedCommandIsOneRecordSpanningItsAttempts(t *testing.T) {
	t.Parallel()
	flag := filepath.Join(t.TempDir(), "failed-once")
	const (
		failFor    = 300 * time.Millisecond
		backoff    = 300 * time.Millisecond
		succeedFor = 200 * time.Millisecond
	)
	script := `if [ -e "$0" ]; then sleep 0.2; exit 0; fi; touch "$0"; sleep 0.3; exit 1`
	job := &jobs.Command{Argv: []string{"sh", "-c", script, flag}, Logger: slog.New(slog.DiscardHandler)}
	s := sched("retried", "@every 1h", hints.NodeLocal, job)
	s.Retries, s.RetryBackoff = 1, backoff
	recs := &runRecs{recorder: newRecorder()}
	sc := mustNew(t, scheduler.Options{Observer: recs, NodeID: "node-a"}, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, waitTimeout)
	defer wcancel()
	if err := sc.WaitLoopParked(wctx); err != nil {
		t.Fatal(err)
	}
	if err := sc.RunManual(scheduler.Manual{ID: "retried", Tick: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rec := recs.waitRecs(t, 1)[0]
	if rec.Result != scheduler.ResultSuccess || rec.Attempts != 2 {
		t.Fatalf("record: %s after %d attempts, want success after 2", rec.Result, rec.Attempts)
	}
	fi, err := os.Stat(flag)
	if err != nil {
		t.Fatal(err)
	}
	stamp := fi.ModTime()
	// The file system's stamp may be coarser than the clock: a 10ms slack.
	if rec.Start.After(stamp.Add(10 * time.Millisecond)) {
		t.Errorf("record starts at %v, after the first attempt's stamp %v: the last attempt's start?", rec.Start, stamp)
	}
	if least := failFor + backoff + succeedFor; rec.Duration < least {
		t.Errorf("record lasts %v, want at least both attempts and the backoff, %v", rec.Duration, least)
	}
	if end, least := rec.Start.Add(rec.Duration), stamp.Add(failFor+backoff+succeedFor-10*time.Millisecond); end.Before(least) {
		t.Errorf("record ends at %v, before the second attempt could have (%v)", end, least)
	}
}

// A run's record carries the node's verdict on its duration: overrun past
// expected_runtime, too_fast for a success under min_runtime, none
// otherwise (a failure is never too fast); and who asked for a manual run.
func TestRunRecordAnomalyAndBy(t *testing.T) {
	t.Parallel()
	sleepy := scheduler.JobFunc(func(ctx context.Context, _ scheduler.Tick) error {
		select {
		case <-time.After(100 * time.Millisecond): // longer than expected_runtime, below
		case <-ctx.Done():
		}
		return nil
	})
	quick := scheduler.JobFunc(func(context.Context, scheduler.Tick) error { return nil })
	failing := scheduler.JobFunc(func(context.Context, scheduler.Tick) error { return errors.New("boom") })
	over := sched("over", "@every 1h", hints.NodeLocal, sleepy)
	over.ExpectedRuntime = 20 * time.Millisecond
	fast := sched("fast", "@every 1h", hints.NodeLocal, quick)
	fast.MinRuntime = time.Hour
	failed := sched("failed", "@every 1h", hints.NodeLocal, failing)
	failed.MinRuntime = time.Hour
	plain := sched("plain", "@every 1h", hints.NodeLocal, quick)
	recs := &runRecs{recorder: newRecorder()}
	sc := mustNew(t, scheduler.Options{Observer: recs, NodeID: "node-a"}, over, fast, failed, plain)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, waitTimeout)
	defer wcancel()
	if err := sc.WaitLoopParked(wctx); err != nil {
		t.Fatal(err)
	}
	by := map[string]string{"over": "", "fast": "alice@host-1", "failed": "api 10.1.2.3", "plain": ""}
	for _, id := range []string{"over", "fast", "failed", "plain"} {
		if err := sc.RunManual(scheduler.Manual{ID: id, Tick: time.Now(), By: by[id]}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"over": scheduler.AnomalyOverrun, "fast": scheduler.AnomalyTooFast, "failed": "", "plain": ""}
	for _, r := range recs.waitRecs(t, 4) {
		if r.Anomaly != want[r.Schedule] || r.By != by[r.Schedule] {
			t.Errorf("%s (%s in %v): anomaly %q by %q, want anomaly %q by %q", r.Schedule, r.Result, r.Duration,
				r.Anomaly, r.By, want[r.Schedule], by[r.Schedule])
		}
	}
}
