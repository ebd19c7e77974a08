package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

const (
	everySecond = "*/1 * * * * *"
	everyMinute = "0 * * * * *"
)

func TestNodeLocalRunsWithoutLock(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("local", everySecond, hints.NodeLocal, job)).start()
	h.step(time.Second)
	h.step(time.Second)
	got := job.got()
	if len(got) != 2 {
		t.Fatalf("ran %d ticks, want 2", len(got))
	}
	for i, tk := range got {
		want := scheduler.Tick{ScheduleID: "local", Time: t0.Add(time.Duration(i+1) * time.Second), NodeID: "node-a"}
		if tk != want {
			t.Errorf("tick %d = %+v, want %+v", i, tk, want)
		}
	}
	if tries, _, _ := h.locker.counts(); tries != 0 {
		t.Errorf("node_local tick called TryLock %d times", tries)
	}
}

func TestLockedRunCarriesFence(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("g", everyMinute, hints.RequireGlobal, job)).start()
	h.step(time.Minute)
	got := job.got()
	if len(got) != 1 {
		t.Fatalf("ran %d ticks, want 1", len(got))
	}
	if tk := got[0]; tk.LockKey != "g" || tk.FencingToken <= 0 || !tk.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("tick = %+v, want lock key g, a fencing token, time %v", tk, t0.Add(time.Minute))
	}
	runs := h.rec.waitRuns(t, 1)
	if runs[0].result != scheduler.ResultSuccess || runs[0].overrun {
		t.Errorf("run = %+v, want success without overrun", runs[0])
	}
	if n := h.logs.count(slog.LevelInfo, "tick ran"); n != 1 {
		t.Errorf("%d 'tick ran' log lines, want 1", n)
	}
	if got := h.logs.attr("tick ran", "tick"); got != "2026-01-01T00:01:00Z" {
		t.Errorf("logged tick %q, want RFC 3339 2026-01-01T00:01:00Z", got)
	}
}

func TestContendedSkips(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("g", everyMinute, hints.RequireGlobal, job)).start()
	other, err := h.peer.TryLock(context.Background(), "g", time.Hour)
	if err != nil || other == nil {
		t.Fatalf("peer TryLock = %v, %v", other, err)
	}
	h.step(time.Minute)
	if n := len(job.got()); n != 0 {
		t.Fatalf("job ran %d times while another node held the lock", n)
	}
	skips := h.rec.waitSkips(t, 1)
	if skips[0].reason != scheduler.SkipContended {
		t.Errorf("skip reason = %q, want contended", skips[0].reason)
	}
	if n := h.logs.count(slog.LevelDebug, "tick skipped"); n != 1 {
		t.Errorf("contended skip logged %d times at Debug, want 1", n)
	}
}

func TestBackendErrorNeverRuns(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("g", everyMinute, hints.RequireGlobal, job))
	h.locker.tryErr = errBackendDown
	h.start()
	h.step(time.Minute)
	if n := len(job.got()); n != 0 {
		t.Fatalf("job ran %d times although TryLock failed", n)
	}
	if s := h.rec.waitSkips(t, 1); s[0].reason != scheduler.SkipBackendError {
		t.Errorf("skip reason = %q, want backend_error", s[0].reason)
	}
	if n := h.logs.count(slog.LevelWarn, "try-lock failed: tick not run"); n != 1 {
		t.Errorf("backend error logged %d times at Warn, want 1", n)
	}
	if got := h.logs.attr("try-lock failed: tick not run", "error"); !strings.Contains(got, errBackendDown.Error()) {
		t.Errorf("logged error %q does not carry the cause", got)
	}
}

func TestLockLostMidRunCancelsJob(t *testing.T) {
	job := newBlockingJob()
	s := sched("g", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = 3 * time.Second // TTL 8s: renewals every 8s/3
	h := newHarness(t, scheduler.Options{}, s).start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	tries, _, _ := h.locker.counts()

	h.locker.mu.Lock()
	h.locker.loseNext = true
	h.locker.mu.Unlock()
	ttl := scheduler.LockTTL(3*time.Second, 0, scheduler.DefaultSafetyMargin)
	h.clock.Advance(ttl / 3) // the first renewal: it finds the lock gone

	if cause := job.waitEnded(t); cause == nil || !strings.Contains(cause.Error(), "lock lost") {
		t.Fatalf("job context ended with cause %v, want a lost lock", cause)
	}
	runs := h.rec.waitRuns(t, 1)
	if runs[0].result != scheduler.ResultLockLost {
		t.Errorf("result = %q, want lock_lost", runs[0].result)
	}
	h.idle()
	if n := h.logs.count(slog.LevelError, "lock lost during the run: cancelling the job"); n != 1 {
		t.Errorf("lost lock logged %d times at Error, want 1", n)
	}
	h.step(ttl) // more renewal periods pass, before the next tick: nothing renews or re-acquires
	if t2, renews, _ := h.locker.counts(); t2 != tries || renews != 1 {
		t.Errorf("after the loss: %d more TryLock, %d Renew calls; want 0 more and 1", t2-tries, renews)
	}
}

func TestLateLockIsNotRunButClaimed(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second}, sched("g", everyMinute, hints.RequireGlobal, job))
	// A slow backend: the answer comes 1.5s after the tick, past the skew.
	h.locker.onTry = func() { h.clock.Advance(1500 * time.Millisecond) }
	h.start()
	h.clock.Advance(time.Minute)
	h.rec.waitSkips(t, 1)
	h.locker.mu.Lock()
	h.locker.onTry = nil
	h.locker.mu.Unlock()
	h.idle()
	if n := len(job.got()); n != 0 {
		t.Fatalf("late lock ran the job %d times", n)
	}
	_, skips, _ := h.rec.snapshot()
	if skips[0].reason != scheduler.SkipBackendError {
		t.Errorf("skip reason = %q, want backend_error", skips[0].reason)
	}
	if n := h.logs.count(slog.LevelWarn, "lock granted late: tick not run"); n != 1 {
		t.Errorf("late lock logged %d times, want 1", n)
	}
	if who := h.heldBy("g"); who != "node-a" {
		t.Fatalf("after a late grant the lock is held by %q, want node-a (the claim)", who)
	}
	h.step(500*time.Millisecond - time.Nanosecond) // T + 2s - 1ns
	if who := h.heldBy("g"); who != "node-a" {
		t.Fatalf("claim dropped before T+2*skew (held by %q)", who)
	}
	h.step(time.Nanosecond) // T + 2*skew
	if who := h.heldBy("g"); who != "" {
		t.Errorf("claim still held by %q at T+2*skew", who)
	}
}

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		overlap  scheduler.Overlap
		wantRuns int
		wantSkip bool
	}{
		{scheduler.OverlapSkip, 1, true},
		{scheduler.OverlapAllow, 2, false},
	} {
		t.Run(string(tc.overlap), func(t *testing.T) {
			job := newBlockingJob()
			s := sched("o", everySecond, hints.NodeLocal, job)
			s.Overlap = tc.overlap
			h := newHarness(t, scheduler.Options{}, s).start()
			h.clock.Advance(time.Second)
			job.waitStarted(t)
			h.clock.Advance(time.Second)
			if tc.wantSkip {
				skips := h.rec.waitSkips(t, 1)
				if skips[0].reason != scheduler.SkipStillRunning || !skips[0].tick.Equal(t0.Add(2*time.Second)) {
					t.Errorf("skip = %+v, want still_running at T+2s", skips[0])
				}
			} else {
				if tk := job.waitStarted(t); !tk.Time.Equal(t0.Add(2 * time.Second)) {
					t.Errorf("second run for %v, want T+2s", tk.Time)
				}
			}
			close(job.release)
			h.rec.waitRuns(t, tc.wantRuns)
			h.idle()
			if _, skips, runs := h.rec.snapshot(); len(runs) != tc.wantRuns || (len(skips) > 0) != tc.wantSkip {
				t.Errorf("runs %d skips %d; want %d runs, skip %v", len(runs), len(skips), tc.wantRuns, tc.wantSkip)
			}
		})
	}
}

func TestJitterHoldsLock(t *testing.T) {
	var asked int64
	job := newBlockingJob()
	s := sched("j", everyMinute, hints.RequireGlobal, job)
	s.Jitter = time.Second
	h := newHarness(t, scheduler.Options{Rand: func(n int64) int64 { asked = n; return int64(700 * time.Millisecond) }}, s).start()
	h.clock.Advance(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.clock.BlockUntilArmed(ctx, 2); err != nil { // the loop's and the jitter's
		t.Fatal(err)
	}
	if asked != int64(time.Second) {
		t.Errorf("Rand asked for [0, %v), want [0, 1s)", time.Duration(asked))
	}
	if who := h.heldBy("j"); who != "node-a" {
		t.Fatalf("during the jitter the lock is held by %q, want node-a", who)
	}
	select {
	case <-job.started:
		t.Fatal("job started before its jitter elapsed")
	default:
	}
	h.clock.Advance(700 * time.Millisecond)
	job.waitStarted(t)
	if now := h.clock.Now(); !now.Equal(t0.Add(time.Minute + 700*time.Millisecond)) {
		t.Errorf("job started at %v", now)
	}
	close(job.release)
	h.rec.waitRuns(t, 1)
}

func TestOverrunKeepsLockByRenewal(t *testing.T) {
	job := newBlockingJob()
	s := sched("slow", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = 3 * time.Second // TTL 8s: renewals every 8s/3
	h := newHarness(t, scheduler.Options{}, s).start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	every := scheduler.LockTTL(3*time.Second, 0, scheduler.DefaultSafetyMargin) / 3
	for i := 1; i <= 4; i++ { // past the expected runtime, and past the TTL
		h.clock.Advance(every)
		h.locker.wait(t, "a renewal", func() bool { _, r, _ := h.locker.counts(); return r >= i })
	}
	h.clock.Advance(12*time.Second - 4*every)
	h.logs.waitFor(t, slog.LevelWarn, "run overran its expected runtime; the lock is kept by renewal")
	if who := h.heldBy("slow"); who != "node-a" {
		t.Fatalf("overrunning job's lock held by %q, want node-a", who)
	}
	if tk, err := h.peer.TryLock(context.Background(), "slow", time.Minute); tk != nil || err != nil {
		t.Fatalf("another node took the overrunning job's lock: %v, %v", tk, err)
	}
	close(job.release)
	runs := h.rec.waitRuns(t, 1)
	if !runs[0].overrun || runs[0].result != scheduler.ResultSuccess || runs[0].d != 12*time.Second {
		t.Errorf("run = %+v, want success, overrun, 12s", runs[0])
	}
	if n := h.logs.count(slog.LevelWarn, "run overran its expected runtime; the lock is kept by renewal"); n != 1 {
		t.Errorf("overrun logged %d times, want once", n)
	}
}

func TestTimeout(t *testing.T) {
	job := newBlockingJob()
	s := sched("t", everyMinute, hints.NodeLocal, job)
	s.Timeout = 5 * time.Second
	h := newHarness(t, scheduler.Options{}, s).start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	h.clock.Advance(5*time.Second - time.Nanosecond)
	select {
	case err := <-job.ended:
		t.Fatalf("job ended before its timeout: %v", err)
	default:
	}
	h.clock.Advance(time.Nanosecond)
	if cause := job.waitEnded(t); cause == nil || !strings.Contains(cause.Error(), "timed out") {
		t.Errorf("job context ended with %v, want the timeout", cause)
	}
	if runs := h.rec.waitRuns(t, 1); runs[0].result != scheduler.ResultTimeout {
		t.Errorf("result = %q, want timeout", runs[0].result)
	}
}

func TestJobErrorAndPanic(t *testing.T) {
	calls := 0
	job := scheduler.JobFunc(func(ctx context.Context, tk scheduler.Tick) error {
		calls++
		if calls == 1 {
			panic("boom")
		}
		return errors.New("job failed")
	})
	h := newHarness(t, scheduler.Options{}, sched("p", everySecond, hints.NodeLocal, job)).start()
	h.step(time.Second)
	h.step(time.Second)
	runs := h.rec.waitRuns(t, 2)
	for i, r := range runs {
		if r.result != scheduler.ResultFailure {
			t.Errorf("run %d result %q, want failure", i, r.result)
		}
	}
	if n := h.logs.count(slog.LevelError, "job panicked"); n != 1 {
		t.Errorf("panic logged %d times, want 1", n)
	}
	if st := h.logs.attr("job panicked", "stack"); !strings.Contains(st, "goroutine") {
		t.Errorf("panic log has no stack: %q", st)
	}
}

func TestClaimOutlivesShortRun(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second}, sched("c", everyMinute, hints.RequireGlobal, job)).start()
	h.step(time.Minute)
	if n := len(job.got()); n != 1 {
		t.Fatalf("ran %d times, want 1", n)
	}
	// A node whose clock is behind fires T now: it must find T claimed.
	if tk, err := h.peer.TryLock(context.Background(), "c", time.Minute); tk != nil || err != nil {
		t.Fatalf("right after the run another node got the lock: %v, %v", tk, err)
	}
	h.step(2*time.Second - time.Nanosecond)
	if who := h.heldBy("c"); who != "node-a" {
		t.Fatalf("claim ended before T+2*skew (held by %q)", who)
	}
	h.step(time.Nanosecond)
	if who := h.heldBy("c"); who != "" {
		t.Fatalf("claim still held by %q at T+2*skew", who)
	}
	if _, _, rel := h.locker.counts(); rel != 1 {
		t.Errorf("%d releases, want 1", rel)
	}
}

func TestClaimReusedByNextTick(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second}, sched("fast", everySecond, hints.RequireGlobal, job)).start()
	for range 5 {
		h.step(time.Second)
	}
	got := job.got()
	if len(got) != 5 {
		t.Fatalf("ran %d ticks in 5s, want 5", len(got))
	}
	for i, tk := range got {
		if !tk.Time.Equal(t0.Add(time.Duration(i+1)*time.Second)) || tk.FencingToken != got[0].FencingToken {
			t.Errorf("tick %d = %v fence %d, want T+%ds fence %d", i, tk.Time, tk.FencingToken, i+1, got[0].FencingToken)
		}
	}
	tries, renews, releases := h.locker.counts()
	if tries != 1 || renews != 4 || releases != 0 {
		t.Errorf("TryLock %d, Renew %d, Release %d; want 1, 4, 0", tries, renews, releases)
	}
	_, skips, _ := h.rec.snapshot()
	if len(skips) != 0 {
		t.Errorf("skips %+v, want none (the claim must not block the next tick)", skips)
	}
}

func TestClaimReuseFallsBackWhenLost(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("fast", everySecond, hints.RequireGlobal, job)).start()
	h.step(time.Second)
	h.locker.mu.Lock()
	h.locker.loseNext = true // the lingering lock is gone when the next tick renews it
	h.locker.mu.Unlock()
	h.step(time.Second)
	got := job.got()
	if len(got) != 2 || got[1].FencingToken <= got[0].FencingToken {
		t.Fatalf("ticks %+v: want 2 runs, the second under a new fencing token", got)
	}
	if n := h.logs.count(slog.LevelWarn, "lingering lock lost: trying to take it afresh"); n != 1 {
		t.Errorf("lost lingering lock logged %d times, want 1", n)
	}
}

func TestStopReleasesClaimsAndWaitsForJobs(t *testing.T) {
	job := newBlockingJob()
	quick := &countingJob{}
	s := sched("long", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour
	h := newHarness(t, scheduler.Options{ShutdownGrace: 10 * time.Second}, s,
		sched("quick", everyMinute, hints.RequireGlobal, quick)).start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	h.rec.waitRuns(t, 1) // quick ran and lingers on its claim
	if who := h.heldBy("quick"); who != "node-a" {
		t.Fatalf("quick's claim held by %q", who)
	}
	h.cancel()
	h.logs.waitFor(t, slog.LevelInfo, "shutting down")
	select {
	case err := <-job.ended:
		t.Fatalf("running job cancelled before the grace ran out: %v", err)
	default:
	}
	h.clock.Advance(10 * time.Second)
	if cause := job.waitEnded(t); cause == nil {
		t.Error("job ended without its context being cancelled")
	}
	if err := <-h.done; err != nil {
		t.Errorf("Run = %v", err)
	}
	h.cancel = nil
	for _, key := range []string{"long", "quick"} {
		if who := h.heldBy(key); who != "" {
			t.Errorf("after stop %q is still held by %q", key, who)
		}
	}
}

func TestStopAbandonsJitterWait(t *testing.T) {
	job := &countingJob{}
	s := sched("j", everyMinute, hints.RequireGlobal, job)
	s.Jitter = 10 * time.Second
	h := newHarness(t, scheduler.Options{Rand: func(int64) int64 { return int64(5 * time.Second) }}, s).start()
	h.clock.Advance(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.clock.BlockUntilArmed(ctx, 2); err != nil {
		t.Fatal(err)
	}
	h.stop()
	if n := len(job.got()); n != 0 {
		t.Errorf("job ran %d times although shutdown began during its jitter", n)
	}
	if n := h.logs.count(slog.LevelInfo, "shutting down: tick abandoned before its run"); n != 1 {
		t.Errorf("abandoned tick logged %d times, want 1", n)
	}
	if who := h.heldBy("j"); who != "" {
		t.Errorf("after stop the lock is held by %q", who)
	}
}

func TestReloadKeepsRunningJobAndLock(t *testing.T) {
	job := newBlockingJob()
	s := sched("r", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour
	other := &countingJob{}
	h := newHarness(t, scheduler.Options{}, s).start()
	h.clock.Advance(time.Minute)
	tk := job.waitStarted(t)

	if err := h.s.Reload([]scheduler.Schedule{sched("new", everyMinute, hints.NodeLocal, other)}); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if next := func() time.Time { h.rec.mu.Lock(); defer h.rec.mu.Unlock(); return h.rec.next["r"] }(); !next.IsZero() {
		t.Errorf("removed schedule's NextTick = %v, want zero", next)
	}
	if who := h.heldBy("r"); who != "node-a" {
		t.Fatalf("Reload dropped the running job's lock (held by %q)", who)
	}
	h.clock.Advance(time.Minute) // "r" no longer fires; "new" does
	h.rec.waitRuns(t, 1)
	select {
	case err := <-job.ended:
		t.Fatalf("Reload ended the running job: %v", err)
	default:
	}
	close(job.release)
	runs := h.rec.waitRuns(t, 2)
	var sawR bool
	for _, r := range runs {
		if r.id == "r" {
			sawR = r.result == scheduler.ResultSuccess && r.tick.Equal(tk.Time)
		}
	}
	if !sawR {
		t.Errorf("runs %+v: the removed schedule's run did not finish normally", runs)
	}
	h.idle()
	if ids := snapshotIDs(h.s); strings.Join(ids, ",") != "new" {
		t.Errorf("Snapshot IDs = %v, want [new]", ids)
	}

	// An invalid set is refused whole; the old set keeps running.
	err := h.s.Reload([]scheduler.Schedule{sched("", everyMinute, hints.NodeLocal, other)})
	if !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("Reload(invalid) = %v, want ErrInvalid", err)
	}
	h.step(time.Minute)
	if n := len(other.got()); n != 2 {
		t.Errorf("after a refused Reload the old set ran %d times, want 2", n)
	}
}

func snapshotIDs(s *scheduler.Scheduler) []string {
	var ids []string
	for _, st := range s.Snapshot() {
		ids = append(ids, st.ID)
	}
	return ids
}

func TestSnapshot(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("a", everyMinute, hints.NodeLocal, job),
		sched("b", everyMinute, hints.RequireGlobal, job))
	if _, err := h.peer.TryLock(context.Background(), "b", time.Hour); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.step(time.Minute)
	got := h.s.Snapshot()
	if len(got) != 2 {
		t.Fatalf("Snapshot = %+v", got)
	}
	a, b := got[0], got[1]
	T := t0.Add(time.Minute)
	if a.ID != "a" || !a.Next.Equal(T.Add(time.Minute)) || !a.LastTick.Equal(T) || a.LastResult != scheduler.ResultSuccess ||
		!a.LastRunStart.Equal(T) || a.LastSkip != "" || a.Running != 0 {
		t.Errorf("a = %+v", a)
	}
	if b.ID != "b" || !b.LastTick.Equal(T) || b.LastSkip != scheduler.SkipContended || b.LastResult != "" {
		t.Errorf("b = %+v", b)
	}
}

func TestClockJumpFiresLatestTickOnly(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("j", everySecond, hints.NodeLocal, job)).start()
	h.step(10*time.Second + 500*time.Millisecond)
	got := job.got()
	if len(got) != 1 || !got[0].Time.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("after a 10.5s jump ran %+v, want one run for T+10s", got)
	}
	fired, _, _ := h.rec.snapshot()
	if len(fired) != 1 || fired[0].lateness != 500*time.Millisecond {
		t.Errorf("fired %+v, want one tick 500ms late", fired)
	}
	if next := h.s.Snapshot()[0].Next; !next.Equal(t0.Add(11 * time.Second)) {
		t.Errorf("next tick %v, want T+11s", next)
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	job := &countingJob{}
	_, err := scheduler.New(scheduler.Options{SafetyMargin: -time.Second}, []scheduler.Schedule{
		{ID: "ok", CronExpr: "@hourly", Job: job},
		{ID: "", CronExpr: "@hourly", Job: job},
		{ID: "dup", CronExpr: "@hourly", Job: job},
		{ID: "dup", CronExpr: "@hourly", Job: job},
		{ID: "badcron", CronExpr: "61 * * * *", Job: job},
		{ID: "never", CronExpr: "0 0 30 2 *", Job: job},
		{ID: "nojob", CronExpr: "@hourly"},
		{ID: "overlap", CronExpr: "@hourly", Overlap: "queue", Job: job},
		{ID: "neg", CronExpr: "@hourly", Jitter: -time.Second, Job: job},
		{ID: "global", CronExpr: "@hourly", Hint: hints.RequireGlobal, Job: job},
		{ID: "hint", CronExpr: "@hourly", Hint: "everywhere", Job: job},
	})
	if err == nil {
		t.Fatal("New accepted a broken set")
	}
	msg := err.Error()
	for _, want := range []string{
		"SafetyMargin is negative", "schedule #2", `schedule "dup": duplicate id`,
		`schedule "badcron"`, `schedule "never"`, `"nojob": no job`, `"overlap": overlap "queue"`,
		`"neg": jitter is negative`, `"global": hints: require_global needs a lock backend`, `"hint": hints: unknown hint`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if !errors.Is(err, scheduler.ErrInvalid) || !errors.Is(err, hints.ErrNoBackend) {
		t.Errorf("error does not wrap ErrInvalid and hints.ErrNoBackend: %v", err)
	}
	if strings.Contains(msg, `"ok"`) {
		t.Errorf("a valid schedule was reported: %s", msg)
	}
}

func TestRequireGlobalOnMemoryWarns(t *testing.T) {
	logs := &logRec{}
	h := newHarness(t, scheduler.Options{Backend: hints.Local, Locker: &faulty{}, Logger: slog.New(logs)},
		sched("g", everyMinute, hints.RequireGlobal, &countingJob{}))
	_ = h
	if n := logs.count(slog.LevelWarn, "require_global on the memory backend locks this process only, not the cluster"); n != 1 {
		t.Errorf("warning logged %d times, want 1", n)
	}
}

// Compile-time check that the real lock contract satisfies the scheduler's.
var _ scheduler.Locker = locking.Locker(nil)

// atSpec fires once, at at.
type atSpec struct{ at time.Time }

func (a atSpec) Next(t time.Time) time.Time {
	if t.Before(a.at) {
		return a.at
	}
	return time.Time{}
}

// On the real clock a timeout is a true context deadline.
func TestTimeoutOnRealClockIsADeadline(t *testing.T) {
	type seen struct {
		hasDeadline bool
		err         error
	}
	got := make(chan seen, 1)
	job := scheduler.JobFunc(func(ctx context.Context, _ scheduler.Tick) error {
		_, ok := ctx.Deadline()
		<-ctx.Done()
		got <- seen{ok, ctx.Err()}
		return ctx.Err()
	})
	rec := newRecorder()
	s, err := scheduler.New(scheduler.Options{NodeID: "n", Observer: rec}, []scheduler.Schedule{{
		ID: "rt", Spec: atSpec{time.Now().Add(20 * time.Millisecond)}, Hint: hints.NodeLocal,
		Timeout: 30 * time.Millisecond, Job: job,
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if r := rec.waitRuns(t, 1); r[0].result != scheduler.ResultTimeout {
		t.Errorf("result = %q, want timeout", r[0].result)
	}
	if sn := <-got; !sn.hasDeadline || !errors.Is(sn.err, context.DeadlineExceeded) {
		t.Errorf("job saw deadline %v, err %v; want a deadline and DeadlineExceeded", sn.hasDeadline, sn.err)
	}
}
