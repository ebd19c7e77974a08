package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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
		tick := t0.Add(time.Duration(i+1) * time.Second)
		want := scheduler.Tick{ScheduleID: "local", Time: tick, NodeID: "node-a",
			RunID: tk.RunID, Attempt: 1, PrevTime: tick.Add(-time.Second)}
		if i == 1 {
			want.LastSuccessTime = got[0].Time
		}
		if tk != want || len(tk.RunID) != 32 {
			t.Errorf("tick %d = %+v, want %+v with a 32-digit run id", i, tk, want)
		}
	}
	if got[0].RunID == got[1].RunID {
		t.Error("two runs share a run id")
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
	h.start()
	h.locker.setTryErr(errBackendDown)
	h.step(time.Minute)
	if n := len(job.got()); n != 0 {
		t.Fatalf("job ran %d times although TryLock failed", n)
	}
	if s := h.rec.waitSkips(t, 1); s[0].reason != scheduler.SkipBackendError {
		t.Errorf("skip reason = %q, want backend_error", s[0].reason)
	}
	const msg = "lock backend failed: locked ticks are skipped until it answers again"
	if n := h.logs.count(slog.LevelWarn, msg); n != 1 {
		t.Errorf("backend error logged %d times at Warn, want 1", n)
	}
	if got := h.logs.attr(msg, "error"); !strings.Contains(got, errBackendDown.Error()) {
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
	ttl := scheduler.LockTTL(3*time.Second, 0, scheduler.DefaultSafetyMargin, scheduler.DefaultMaxClockSkew)
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
			h.loopParked()
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
	every := scheduler.LockTTL(3*time.Second, 0, scheduler.DefaultSafetyMargin, scheduler.DefaultMaxClockSkew) / 3
	for i := 1; i <= 4; i++ { // past the expected runtime, and past the TTL
		// Only once the run's watch has armed its timer (with the loop's):
		// the job can tell it started before the watch is armed, and a
		// step taken then was lost: the watch armed from the later time,
		// and the renewal waited for a step that never came (seen in CI).
		// And only once the last step's renewal returned: a step taken
		// while it was in flight let the lease deadline pass before the
		// lease was extended (lock_lost, seen in a CI rehearsal).
		h.advanceWhenRenewed(2, every)
		h.locker.wait(t, "a renewal", func() bool { _, r, _ := h.locker.counts(); return r >= i })
	}
	h.advanceWhenRenewed(2, 12*time.Second-4*every)
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

// ctxLocker records the context of every TryLock.
type ctxLocker struct {
	scheduler.Locker
	mu   sync.Mutex
	ctxs []context.Context
	left []time.Duration // time to the deadline, as TryLock saw it
}

func (c *ctxLocker) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	c.mu.Lock()
	c.ctxs = append(c.ctxs, ctx)
	if d, ok := ctx.Deadline(); ok {
		c.left = append(c.left, time.Until(d))
	} else {
		c.left = append(c.left, -1)
	}
	c.mu.Unlock()
	return c.Locker.TryLockTick(ctx, req)
}

// A lock answered after its lease is over is worthless, so every TryLock
// is bounded by the TTL it asks for; ticks that fire together share one
// deadline (the shortest TTL among them), and it is let go as soon as the
// last of them has its answer, not kept for the TTL.
func TestTryLockIsBoundedByTheShortestTTLOfItsBurst(t *testing.T) {
	cl := &ctxLocker{}
	h := newHarness(t, scheduler.Options{SafetyMargin: time.Second, MaxClockSkew: time.Second})
	cl.Locker = h.locker
	scheds := []scheduler.Schedule{
		sched("short", everyMinute, hints.RequireGlobal, &countingJob{}),
		sched("long", everyMinute, hints.RequireGlobal, &countingJob{}),
		sched("local", everyMinute, hints.NodeLocal, &countingJob{}),
	}
	scheds[0].ExpectedRuntime = 10 * time.Second // TTL 11s
	scheds[1].ExpectedRuntime = time.Hour
	s, err := scheduler.New(scheduler.Options{Clock: h.clock, Locker: cl, Backend: hints.Distributed,
		SafetyMargin: time.Second, Observer: h.rec}, scheds)
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	h.start()
	cl.mu.Lock() // forget the catch-up's try-lock-ticks at start (for the tick at t0)
	cl.ctxs, cl.left = nil, nil
	cl.mu.Unlock()
	h.step(time.Minute)
	h.rec.waitRuns(t, 3)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.ctxs) != 2 {
		t.Fatalf("%d TryLock calls, want 2 (the node_local schedule takes no lock)", len(cl.ctxs))
	}
	for i, left := range cl.left {
		if left <= 0 || left > 11*time.Second {
			t.Errorf("TryLock %d: deadline %v away, want within the shortest TTL of the burst (11s)", i, left)
		}
	}
	for i, ctx := range cl.ctxs {
		if ctx.Err() == nil {
			t.Errorf("TryLock %d: its context is still live after every tick of the burst took its lock", i)
		}
	}
}
