package scheduler_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The clock-skew claim (claim.go) and graceful stop.

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
	// Stop without moving the clock: the jitter must end by the shutdown,
	// not by its timer.
	h.cancel()
	h.logs.waitFor(t, slog.LevelInfo, "shutting down: tick abandoned before its run")
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

// A graceful stop keeps a lingering claim until its time is up, then
// releases it: released at once, it would let a node whose clock runs
// behind run the claimed tick again.
func TestStopKeepsClaimUntilItsTime(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second}, sched("c", everyMinute, hints.RequireGlobal, job)).start()
	h.step(time.Minute)
	if n := len(job.got()); n != 1 {
		t.Fatalf("ran %d times, want 1", n)
	}
	h.cancel()
	h.logs.waitFor(t, slog.LevelInfo, "shutting down: keeping tick claims until their time is up")
	h.clock.Advance(2*time.Second - time.Nanosecond)
	if who := h.heldBy("c"); who != "node-a" {
		t.Fatalf("stop dropped the claim before T+2*skew (held by %q)", who)
	}
	select {
	case err := <-h.done:
		t.Fatalf("Run returned (%v) while its claim still had time to run", err)
	default:
	}
	h.clock.Advance(time.Nanosecond)
	if err := <-h.done; err != nil {
		t.Errorf("Run = %v", err)
	}
	h.cancel = nil
	if who := h.heldBy("c"); who != "" {
		t.Errorf("after stop the claim is still held by %q", who)
	}
}

// claiming adds locking.Claimer to a Locker, as the Postgres backend has,
// recording each claim's duration and failing when told to.
type claiming struct {
	scheduler.Locker
	mu   sync.Mutex
	ds   []time.Duration
	fail error
}

func (c *claiming) Claim(_ context.Context, _ *locking.Handle, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ds = append(c.ds, d)
	return c.fail
}

func (c *claiming) claims() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.ds...)
}

// A backend whose locks die with their holder gets every locked tick's
// claim recorded, reused locks included, for T + 2*skew from its start; a
// claim that cannot be recorded means the tick does not run.
func TestClaimRecordedOnBackendsThatNeedIt(t *testing.T) {
	c := &claiming{}
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second, Locker: c, Backend: hints.Distributed},
		sched("fast", everySecond, hints.RequireGlobal, job))
	c.Locker = h.locker
	h.start()
	for range 3 {
		h.step(time.Second)
	}
	if n := len(job.got()); n != 3 {
		t.Fatalf("ran %d ticks, want 3", n)
	}
	got := c.claims()
	if len(got) != 3 {
		t.Fatalf("%d claims recorded for 3 ticks (one fresh lock, two reused), want 3", len(got))
	}
	for i, d := range got {
		if d != 2*time.Second {
			t.Errorf("claim %d lasts %v from its tick, want 2s (2 × max_clock_skew)", i, d)
		}
	}

	c.mu.Lock()
	c.fail = errBackendDown
	c.mu.Unlock()
	h.step(time.Second)
	if n := len(job.got()); n != 3 {
		t.Fatalf("a tick whose claim failed ran (%d runs)", n)
	}
	skips := h.rec.waitSkips(t, 1)
	if skips[0].reason != scheduler.SkipBackendError {
		t.Errorf("skip reason %q, want backend_error", skips[0].reason)
	}
}
