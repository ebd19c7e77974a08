package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// Tests of the tick mark as the scheduler uses it (DESIGN.md "A tick's
// life" and "Rules of the mark"). The backend's side of each rule is in
// locking/lockertest; these prove the scheduler asks the right questions.

// The lock is released the moment the run ends: the mark, not the lock,
// keeps the tick from running twice.
func TestLockReleasedAtOnceAfterRun(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("r", everyMinute, hints.RequireGlobal, job)).start()
	h.step(time.Minute)
	if n := len(job.got()); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if who := h.heldBy("r"); who != "" {
		t.Fatalf("after the run the lock is held by %q, want free", who)
	}
	if _, _, releases := h.locker.counts(); releases != 1 {
		t.Errorf("%d releases, want 1", releases)
	}
	// Another node asking for the same tick afterwards is told "done".
	ans, err := h.peer.TryLockTick(context.Background(), locking.TickRequest{
		Key: "r", Tick: t0.Add(time.Minute), TTL: time.Minute, MaxSkew: time.Second, Window: time.Minute})
	if err != nil || ans.Verdict != locking.TickDone {
		t.Fatalf("peer asking for the tick just run: %v, %v; want done", ans.Verdict, err)
	}
}

// The reproduction of the drift double run: node A on time, node B 1.5s behind,
// max_clock_skew 2s, every second with 500ms of jitter; A stops during
// the jitter of a tick. Under the old design (a lock held until
// T+2×skew and reused for the next tick) tick 00:00:01 ran on A and B.
func TestStopDuringJitterNeverRunsATickTwice(t *testing.T) {
	base := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(base.Now))
	var mu sync.Mutex
	runs := map[time.Time][]string{}
	job := scheduler.JobFunc(func(_ context.Context, tk scheduler.Tick) error {
		mu.Lock()
		runs[tk.Time] = append(runs[tk.Time], tk.NodeID)
		mu.Unlock()
		return nil
	})
	// B waits no jitter, so the test can wait for each of its ticks to be
	// handled before it moves the clock on.
	newNode := func(id string, off, jitter time.Duration) *scheduler.Scheduler {
		s, err := scheduler.New(scheduler.Options{
			NodeID: id, Locker: mem.Peer(id), Backend: hints.Distributed,
			MaxClockSkew: 2 * time.Second, Clock: scheduler.OffsetClock(base, off),
			Rand: func(int64) int64 { return int64(400 * time.Millisecond) },
		}, []scheduler.Schedule{{ID: "j", CronExpr: "*/1 * * * * *", Hint: hints.RequireGlobal,
			ExpectedRuntime: 10 * time.Second, Jitter: jitter, Job: job}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newNode("a", 0, 500*time.Millisecond), newNode("b", -1500*time.Millisecond, 0)
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	doneA, doneB := make(chan struct{}), make(chan struct{})
	go func() { defer close(doneA); _ = a.Run(ctxA) }()
	go func() { defer close(doneB); _ = b.Run(ctxB) }()
	wctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, s := range []*scheduler.Scheduler{a, b} { // the catch-up at start done too
		if err := s.WaitIdle(wctx); err != nil {
			t.Fatal(err)
		}
	}
	// 00:00:01 fires on A; A takes the lock and waits its jitter.
	base.Advance(time.Second)
	if err := base.BlockUntilArmed(wctx, 3); err != nil { // two loop timers and A's jitter
		t.Fatalf("%v: %d timers armed; a: %s; b: %s; runs %v", err, base.Armed(), a.IdleState(), b.IdleState(), runs)
	}
	stopA() // during the jitter: A runs the tick at once, then stops
	<-doneA
	// B handled its own tick of that Advance; it must have re-armed its
	// timer before the clock moves again, or the timer, armed from a
	// reading taken before the move, fires one step late.
	if err := b.WaitIdle(wctx); err != nil {
		t.Fatalf("%v: b %s", err, b.IdleState())
	}
	// B's clock reaches 00:00:01 1.5s later, and every tick after.
	for range 10 {
		base.Advance(500 * time.Millisecond)
		if err := b.WaitIdle(wctx); err != nil {
			t.Fatalf("%v: b %s; armed %d; runs %v", err, b.IdleState(), base.Armed(), runs)
		}
	}
	stopB()
	drain(t, base, doneB)
	mu.Lock()
	defer mu.Unlock()
	if got := runs[t0.Add(time.Second)]; len(got) != 1 || got[0] != "a" {
		t.Fatalf("tick 00:00:01 ran on %v, want once on a (A stopped during its jitter)", got)
	}
	for tick, nodes := range runs {
		if len(nodes) != 1 {
			t.Errorf("tick %v ran on %v", tick.Format(time.TimeOnly), nodes)
		}
	}
	// Every tick B's clock passed after the handover ran, on B: no tick lost.
	for s := 2; s <= 4; s++ {
		if got := runs[t0.Add(time.Duration(s)*time.Second)]; len(got) != 1 {
			t.Errorf("tick 00:00:0%d ran %d times, want 1 (no tick lost at the handover)", s, len(got))
		}
	}
}

// Shutdown during the jitter runs the tick at once instead of losing it:
// its mark is raised, so no other node would run it.
func TestStopDuringJitterRunsTheTickAtOnce(t *testing.T) {
	job := &countingJob{}
	s := sched("j", everyMinute, hints.RequireGlobal, job)
	s.Jitter = 10 * time.Second
	h := newHarness(t, scheduler.Options{Rand: func(int64) int64 { return int64(5 * time.Second) }}, s).start()
	h.clock.Advance(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.clock.BlockUntilArmed(ctx, 3); err != nil { // loop, jitter wait, renewal
		t.Fatal(err)
	}
	h.cancel()
	h.rec.waitRuns(t, 1) // the clock has not moved: the shutdown, not the timer, ended the jitter
	h.stop()
	got := job.got()
	if len(got) != 1 || !got[0].Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("runs %v, want the tick whose jitter the shutdown ended", got)
	}
	if who := h.heldBy("j"); who != "" {
		t.Errorf("after stop the lock is held by %q", who)
	}
}

// A SIGHUP that lands between a tick's time and the loop popping it must
// not drop the tick: Reload keeps an unchanged schedule's next tick.
func TestReloadAtTheDueInstantKeepsTheTick(t *testing.T) {
	job := &countingJob{}
	s := sched("r", everyMinute, hints.NodeLocal, job)
	h := newHarness(t, scheduler.Options{}, s).start()
	const loops = 200
	for i := range loops {
		h.loopParked()
		h.clock.Advance(time.Minute) // due now; the loop may or may not have popped it
		if err := h.s.Reload([]scheduler.Schedule{s}); err != nil {
			t.Fatal(err)
		}
		h.idle()
		if n := len(job.got()); n != i+1 {
			t.Fatalf("after %d due-instant reloads %d runs, want %d", i+1, n, i+1)
		}
	}
}

// The floor the scheduler passes is the latest tick it saw decided, so a
// backend that forgot its marks cannot make such a tick run again here.
func TestFloorIsTheLatestDecidedTick(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("f", everyMinute, hints.RequireGlobal, job)).start()
	h.step(time.Minute)
	h.step(time.Minute)
	h.locker.mu.Lock()
	var reqs []locking.TickRequest
	for _, r := range h.locker.reqs {
		if r.Tick.After(t0) { // not the catch-up's try of t0 at start
			reqs = append(reqs, r)
		}
	}
	h.locker.mu.Unlock()
	if len(reqs) != 2 {
		t.Fatalf("%d try-lock-ticks, want 2", len(reqs))
	}
	if !reqs[0].Floor.Equal(t0) {
		t.Errorf("first floor %v, want t0 (the catch-up at start saw t0 decided)", reqs[0].Floor)
	}
	if !reqs[1].Floor.Equal(t0.Add(time.Minute)) {
		t.Errorf("second floor %v, want the first tick %v", reqs[1].Floor, t0.Add(time.Minute))
	}
	if reqs[1].MaxSkew != scheduler.DefaultMaxClockSkew || reqs[1].Window != time.Minute || reqs[1].PerTick {
		t.Errorf("request %+v: want the default skew, a one-period window, the schedule's lock", reqs[1])
	}
}

// A weekly job whose tick fell in an outage of every node runs once, late,
// as soon as the first node starts again.
func TestCatchupRunsTheMissedTickOnceAtStart(t *testing.T) {
	clock := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(clock.Now))
	job := &countingJob{}
	weekly := sched("weekly", "0 3 * * 0", hints.RequireGlobal, job) // Sundays 03:00
	weekly.ExpectedRuntime = time.Minute
	first := newHarness(t, scheduler.Options{Clock: clock, Locker: mem.Peer("a"), Backend: hints.Distributed}, weekly).start()
	first.stop() // the mark is created at load; then every node is down
	// 2026-01-04 is a Sunday: the 03:00 tick passes while nobody runs.
	clock.Advance(time.Date(2026, 1, 4, 3, 10, 0, 0, time.UTC).Sub(clock.Now()))
	nodes := make([]*harness, 3)
	for i := range nodes {
		nodes[i] = newHarness(t, scheduler.Options{Clock: clock, Locker: mem.Peer(fmt.Sprint("n", i)),
			Backend: hints.Distributed, NodeID: fmt.Sprint("n", i)}, weekly).start()
	}
	for _, n := range nodes {
		n.idle()
	}
	got := job.got()
	if len(got) != 1 || !got[0].Time.Equal(time.Date(2026, 1, 4, 3, 0, 0, 0, time.UTC)) {
		t.Fatalf("runs %v, want the missed 03:00 tick once", got)
	}
	for _, n := range nodes {
		n.stop()
	}
	// And a restart never runs it again.
	again := newHarness(t, scheduler.Options{Clock: clock, Locker: mem.Peer("z"), Backend: hints.Distributed}, weekly).start()
	again.idle()
	if n := len(job.got()); n != 1 {
		t.Fatalf("%d runs after another restart, want still 1", n)
	}
}

// A schedule never runs a tick from before it was first loaded by any
// node: its mark is created at load.
func TestNewScheduleNeverRunsATickFromBeforeItsLoad(t *testing.T) {
	job := &countingJob{}
	hourly := sched("new", "0 * * * *", hints.RequireGlobal, job)
	h := newHarness(t, scheduler.Options{}, hourly)
	h.clock.Advance(10 * time.Minute) // 00:00 passed 10 minutes ago, within the one-hour window
	h.start()
	h.idle()
	if n := len(job.got()); n != 0 {
		t.Fatalf("%d runs of a tick from before the schedule was loaded", n)
	}
	// Catch-up still works for a later tick missed while the node was down.
	h.stop()
	h.clock.Advance(time.Hour) // 01:00 passes with no node
	h2 := newHarness(t, scheduler.Options{Locker: h.locker, Backend: hints.Distributed, Clock: h.clock}, hourly).start()
	h2.idle()
	if got := job.got(); len(got) != 1 || !got[0].Time.Equal(t0.Add(time.Hour)) {
		t.Fatalf("runs %v, want the 01:00 tick caught up once", got)
	}
}

// Ticks skipped while paused are consumed: neither resume nor a restart's
// catch-up replays them.
func TestPausedTicksAreNeverReplayed(t *testing.T) {
	job := &countingJob{}
	hourly := sched("p", "0 * * * *", hints.RequireGlobal, job)
	h := newHarness(t, scheduler.Options{}, hourly).start()
	if err := h.mem.SetPause(context.Background(), "p", locking.Pause{Paused: true, Note: "incident"}); err != nil {
		t.Fatal(err)
	}
	h.step(time.Hour)
	_, skips, _ := h.rec.snapshot()
	if len(skips) != 1 || skips[0].reason != scheduler.SkipPaused {
		t.Fatalf("skips %+v, want one paused", skips)
	}
	if err := h.mem.SetPause(context.Background(), "p", locking.Pause{}); err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.clock.Advance(time.Minute)
	h2 := newHarness(t, scheduler.Options{Locker: h.locker, Backend: hints.Distributed, Clock: h.clock}, hourly).start()
	h2.idle()
	if n := len(job.got()); n != 0 {
		t.Fatalf("%d runs: a tick skipped while paused was replayed", n)
	}
	h2.step(time.Hour - time.Minute)
	if n := len(job.got()); n != 1 {
		t.Fatalf("%d runs after resume, want the next tick to run", n)
	}
}

// A pause racing a tick: once SetPause has returned, no tick is granted.
func TestPauseRacingATickWins(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("race", "*/1 * * * * *", hints.RequireGlobal, job)).start()
	for i := range 100 {
		paused := make(chan struct{})
		go func() {
			defer close(paused)
			if err := h.mem.SetPause(context.Background(), "race", locking.Pause{Paused: true}); err != nil {
				t.Error(err)
			}
		}()
		h.clock.Advance(time.Second) // the tick races the pause
		<-paused
		h.idle()
		before := len(job.got())
		h.step(time.Second) // a tick after the pause returned
		if n := len(job.got()); n != before {
			t.Fatalf("loop %d: a tick ran after SetPause returned", i)
		}
		if err := h.mem.SetPause(context.Background(), "race", locking.Pause{}); err != nil {
			t.Fatal(err)
		}
	}
}

// A node frozen past its lease (SIGSTOP, a VM pause) cancels its job the
// moment it runs again, without waiting for a renewal to answer.
func TestLeaseDeadlineCancelsWithoutARenewalAnswer(t *testing.T) {
	job := newBlockingJob()
	s := sched("l", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour
	h := newHarness(t, scheduler.Options{SafetyMargin: 5 * time.Second}, s)
	renewStarted := make(chan struct{}, 16)
	h.locker.renewErr = func(ctx context.Context) error {
		renewStarted <- struct{}{}
		<-ctx.Done() // a backend that never answers
		return ctx.Err()
	}
	h.start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	// The lease is TTL (1h + 5s) minus the margin: 1h. Freeze past it.
	h.clock.Advance(2 * time.Hour)
	cause := job.waitEnded(t)
	if cause == nil {
		t.Fatal("job ended without its context being cancelled")
	}
	runs := h.rec.waitRuns(t, 1)
	if runs[0].result != scheduler.ResultLockLost {
		t.Errorf("result %q, want lock_lost", runs[0].result)
	}
	select {
	case <-renewStarted:
		t.Error("a renewal was sent after the lease had run out; the job must be cancelled without one")
	default:
	}
}

// On a backend that drops a silent holder's locks sooner than the TTL
// (Postgres), renewals come often enough for its MaxLease.
type boundedLocker struct {
	scheduler.Locker
	lease time.Duration
	// renewed, when set, hears of each renewal once it returned.
	renewed chan struct{}
}

func (b boundedLocker) MaxLease() time.Duration { return b.lease }

func (b boundedLocker) Renew(ctx context.Context, h *locking.Handle) error {
	err := b.Locker.Renew(ctx, h)
	if b.renewed != nil {
		b.renewed <- struct{}{}
	}
	return err
}

func TestRenewalCadenceBoundedByMaxLease(t *testing.T) {
	job := newBlockingJob()
	s := sched("b", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour // TTL 1h5s: TTL/3 would renew every 21 minutes
	h := newHarness(t, scheduler.Options{SafetyMargin: 2 * time.Second}, s)
	renewed := make(chan struct{}, 32)
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: boundedLocker{h.locker, 8 * time.Second, renewed},
		Backend: hints.Distributed, Observer: h.rec, SafetyMargin: 2 * time.Second}, s)
	h.start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	// usable lease 8s - 2s = 6s, renewed every 2s (TTL/3 would be 21 minutes).
	for i := 1; i <= 15; i++ {
		// Moved only once the last renewal returned and the watch armed
		// the next: a renewal still in flight when its period comes round
		// keeps that period (run.go), so moving the clock first (a loaded
		// machine) left the count one short.
		if err := h.clock.BlockUntilArmed(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(2 * time.Second)
		select {
		case <-renewed:
		case <-time.After(waitTimeout):
			_, renews, _ := h.locker.counts()
			t.Fatalf("renewal %d never returned (%d sent)", i, renews)
		}
	}
	if _, renews, _ := h.locker.counts(); renews != 15 {
		t.Errorf("%d renewals in 30s, want 15 (every third of the 6s usable lease)", renews)
	}
	close(job.release)
	job.waitEnded(t)
}

func mustNew(t *testing.T, opts scheduler.Options, scheds ...scheduler.Schedule) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(opts, scheds)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// overlap = "allow" under a lock: the lock is the tick's, so a run that
// lasts longer than the period overlaps the next tick's run.
func TestOverlapAllowUnderALock(t *testing.T) {
	job := newBlockingJob()
	s := sched("a", everyMinute, hints.RequireGlobal, job)
	s.Overlap = scheduler.OverlapAllow
	s.ExpectedRuntime = 5 * time.Minute
	h := newHarness(t, scheduler.Options{}, s).start()
	h.clock.Advance(time.Minute)
	first := job.waitStarted(t)
	h.loopParked()
	h.clock.Advance(time.Minute)
	second := job.waitStarted(t)
	if !second.Time.Equal(first.Time.Add(time.Minute)) || second.FencingToken <= first.FencingToken {
		t.Fatalf("second run %+v after %+v: want the next tick with a higher fence", second, first)
	}
	// Another node asking for either tick is told done.
	for _, tick := range []time.Time{first.Time, second.Time} {
		ans, err := h.peer.TryLockTick(context.Background(), locking.TickRequest{Key: "a", Tick: tick,
			TTL: time.Minute, PerTick: true, MaxSkew: time.Second, Window: time.Minute})
		if err != nil || ans.Verdict != locking.TickDone {
			t.Errorf("peer asking for %v: %v, %v; want done", tick, ans.Verdict, err)
		}
	}
	close(job.release)
	job.waitEnded(t)
	job.waitEnded(t)
}

// A node whose clock runs ahead by more than max_clock_skew has its ticks
// refused, reported as backend_error with the measured offset logged.
func TestNodeAheadIsRefused(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("ahead", everyMinute, hints.RequireGlobal, job))
	off := &offsetRec{}
	h.s = mustNew(t, scheduler.Options{Clock: scheduler.OffsetClock(h.clock, 5*time.Second),
		Locker: h.locker, Backend: hints.Distributed, Observer: off, Logger: slog.New(h.logs)},
		sched("ahead", everyMinute, hints.RequireGlobal, job))
	h.start()
	for range 60 { // a second at a time: the node fires its tick 5s before the backend's clock
		h.step(time.Second)
	}
	if n := len(job.got()); n != 0 {
		t.Fatalf("%d runs on a node 5s ahead with max_clock_skew 1s", n)
	}
	if n := h.logs.count(slog.LevelError, "tick refused: this node's clock runs ahead of the lock backend's"); n != 1 {
		t.Errorf("refusal logged %d times, want 1", n)
	}
	if d := off.get(); d < 4*time.Second || d > 6*time.Second {
		t.Errorf("clock offset reported %v, want about 5s", d)
	}
}

type offsetRec struct {
	scheduler.NopObserver
	mu sync.Mutex
	d  time.Duration
}

func (o *offsetRec) ClockOffset(d time.Duration) { o.mu.Lock(); o.d = d; o.mu.Unlock() }
func (o *offsetRec) get() time.Duration          { o.mu.Lock(); defer o.mu.Unlock(); return o.d }

// A slow backend that grants the lock after max_clock_skew: the tick is
// late, and runs (once) because it is within its catch-up window.
func TestLateGrantRunsWithinTheCatchupWindow(t *testing.T) {
	job := &countingJob{}
	g := sched("g", everyMinute, hints.RequireGlobal, job)
	g.ExpectedRuntime = time.Minute // a lease long enough to outlast the slow answer
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second}, g).start()
	h.locker.mu.Lock()
	h.locker.onTry = func() { h.clock.Advance(1500 * time.Millisecond) }
	h.locker.mu.Unlock()
	h.clock.Advance(time.Minute)
	h.rec.waitRuns(t, 1)
	h.locker.mu.Lock()
	h.locker.onTry = nil
	h.locker.mu.Unlock()
	h.idle()
	if n := len(job.got()); n != 1 {
		t.Fatalf("late grant ran the job %d times, want 1", n)
	}
	_, skips, _ := h.rec.snapshot()
	if len(skips) != 0 {
		t.Errorf("skips %+v, want none", skips)
	}
}

// catchup_window = "0s": a late tick is missed, an on-time one runs.
func TestNoCatchupSkipsLateTicksAsMissed(t *testing.T) {
	job := &countingJob{}
	s := sched("z", everyMinute, hints.RequireGlobal, job)
	s.CatchupWindow = scheduler.NoCatchup
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second}, s).start()
	late := true
	h.locker.mu.Lock()
	h.locker.onTry = func() {
		if late {
			h.clock.Advance(1500 * time.Millisecond)
		}
	}
	h.locker.mu.Unlock()
	h.clock.Advance(time.Minute)
	h.rec.waitSkips(t, 1)
	h.idle()
	h.locker.mu.Lock()
	late = false
	h.locker.mu.Unlock()
	h.step(time.Minute - 1500*time.Millisecond)
	_, skips, runs := h.rec.snapshot()
	if len(skips) != 1 || skips[0].reason != scheduler.SkipMissed {
		t.Fatalf("skips %+v, want one missed", skips)
	}
	if len(runs) != 1 {
		t.Fatalf("%d runs, want the on-time tick to run", len(runs))
	}
}

// A single node stopped 3.5s across a tick (SIGSTOP, a GC pause, a VM
// steal) runs it late when it resumes, never as backend_error.
func TestSingleNodeStoppedAcrossATickRunsItLate(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("s", "*/10 * * * * *", hints.PreferGlobal, job))
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: h.locker, Backend: hints.Local, Observer: h.rec},
		sched("s", "*/10 * * * * *", hints.PreferGlobal, job))
	h.start()
	h.clock.Advance(13500 * time.Millisecond) // the loop wakes 3.5s after 00:00:10
	h.idle()
	got := job.got()
	if len(got) != 1 || !got[0].Time.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("runs %v, want 00:00:10 run late once", got)
	}
	_, skips, _ := h.rec.snapshot()
	for _, s := range skips {
		t.Errorf("skipped %v as %q", s.tick, s.reason)
	}
}

// An outage of the backend logs one warning per node, not one per tick,
// and when the backend answers again the schedules it made skip are
// caught up.
func TestBackendOutageLogsOnceAndCatchesUp(t *testing.T) {
	job := &countingJob{}
	daily := sched("d", "0 3 * * *", hints.RequireGlobal, job)
	daily.ExpectedRuntime = time.Minute
	minutely := sched("m", everyMinute, hints.RequireGlobal, &countingJob{})
	h := newHarness(t, scheduler.Options{}, daily, minutely).start()
	h.locker.setTryErr(errBackendDown)
	h.clock.Advance(3*time.Hour - 30*time.Second) // to 02:59:30, through 179 ticks of m
	h.idle()
	h.step(30 * time.Second) // 03:00: d's tick fails too
	if n := h.logs.count(slog.LevelWarn, "lock backend failed: locked ticks are skipped until it answers again"); n != 1 {
		t.Errorf("outage logged %d warnings, want 1", n)
	}
	h.locker.setTryErr(nil)
	// The next probe finds the backend back; wait for its timer to be armed
	// (a probe of the outage may still be under way), or the move is lost.
	// A probe under way may itself find the backend back: then none is
	// armed after it (under load, waiting for one timed out).
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.s.WaitProbeArmedOrRecovered(ctx); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(5 * time.Second)
	h.logs.waitFor(t, slog.LevelInfo, "lock backend answers again")
	h.idle()
	got := job.got()
	if len(got) != 1 || !got[0].Time.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("runs of d %v, want its 03:00 tick caught up once", got)
	}
}

func TestStopWaitsForJobsAndReleasesLocks(t *testing.T) {
	job := newBlockingJob()
	quick := &countingJob{}
	s := sched("long", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour
	h := newHarness(t, scheduler.Options{ShutdownGrace: 10 * time.Second}, s,
		sched("quick", everyMinute, hints.RequireGlobal, quick)).start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	h.rec.waitRuns(t, 1) // quick ran (reported just before its release)
	h.locker.wait(t, "quick's release", func() bool { _, _, releases := h.locker.counts(); return releases >= 1 })
	if who := h.heldBy("quick"); who != "" {
		t.Fatalf("quick's lock held by %q after its run", who)
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
	runs := h.rec.waitRuns(t, 2)
	if r := runs[len(runs)-1]; r.result != scheduler.ResultCancelled {
		t.Errorf("a job cancelled by shutdown ended %q, want cancelled (not a failure)", r.result)
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

// steppedClock reads a fake clock plus a step the test sets, as a host
// whose wall clock jumps (a suspend, an NTP step) while its timers, which
// count monotonic time, do not see it.
type steppedClock struct {
	*fakeclock.Clock
	mu   sync.Mutex
	step time.Duration
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Clock.Now().Add(c.step)
}

// The firing loop re-reads the wall clock every couple of seconds: after
// a jump of the wall clock its ticks fire within that, not late by the
// jump (the loop's timer alone would have waited the full minute).
func TestLoopRereadsTheWallClock(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("w", everyMinute, hints.NodeLocal, job))
	sc := &steppedClock{Clock: h.clock}
	h.s = mustNew(t, scheduler.Options{Clock: sc, Observer: h.rec}, sched("w", everyMinute, hints.NodeLocal, job))
	h.start()
	sc.mu.Lock()
	sc.step = 59 * time.Second // the wall clock jumps to 00:00:59
	sc.mu.Unlock()
	h.step(2 * time.Second) // two seconds of monotonic time: the wall clock says 00:01:01
	got := job.got()
	if len(got) != 1 || !got[0].Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("runs %v, want the 00:01:00 tick within 2s of the jump", got)
	}
}

// A run cancelled at its lease deadline still releases its lock: on a
// backend that keeps it (a Postgres session outliving the freeze), the
// schedule would otherwise never run again while the process lives.
func TestLockReleasedAfterALeaseDeadline(t *testing.T) {
	job := newBlockingJob()
	s := sched("keep", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour // the lock's TTL: the backend keeps it for an hour
	h := newHarness(t, scheduler.Options{}, s)
	h.locker.renewErr = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() } // never answers
	renewed := make(chan struct{}, 32)
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: boundedLocker{h.locker, 8 * time.Second, renewed},
		Backend: hints.Distributed, Observer: h.rec, SafetyMargin: 2 * time.Second}, s)
	h.start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	h.clock.Advance(30 * time.Second) // frozen past the 6s lease
	job.waitEnded(t)
	if r := h.rec.waitRuns(t, 1); r[0].result != scheduler.ResultLockLost {
		t.Fatalf("result %q, want lock_lost", r[0].result)
	}
	h.idle()
	if who := h.heldBy("keep"); who != "" {
		t.Fatalf("after a lock_lost run the lock is still held by %q: nobody could run the schedule", who)
	}
}

// A node starting just after T (by its clock) asks for T even when the
// next tick is near: T is on time, and a node whose clock runs ahead
// would otherwise claim T+1 first and leave T to nobody.
func TestCatchupAtStartAsksForAnOnTimeTick(t *testing.T) {
	job := &countingJob{}
	s := sched("s", everySecond, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Minute // the next tick comes before a late run would end
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second}, s)
	if err := h.mem.InitMarks(context.Background(), []string{"s"}); err != nil { // loaded before, at t0
		t.Fatal(err)
	}
	h.clock.Advance(1300 * time.Millisecond) // start at 00:00:01.3: tick 00:00:01 is 300ms old
	h.start()
	h.idle()
	if got := job.got(); len(got) != 1 || !got[0].Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("runs %v, want tick 00:00:01 asked for and run at start", got)
	}
}

// EndGrace (a second ^C) cancels running jobs at once, as cancelled.
func TestEndGraceCancelsRunningJobsAtOnce(t *testing.T) {
	job := newBlockingJob()
	s := sched("g", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour
	h := newHarness(t, scheduler.Options{ShutdownGrace: time.Hour}, s).start()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	h.cancel()
	h.logs.waitFor(t, slog.LevelInfo, "shutting down")
	h.s.EndGrace()
	if cause := job.waitEnded(t); cause == nil {
		t.Fatal("job not cancelled by EndGrace")
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	h.cancel = nil
	if r := h.rec.waitRuns(t, 1); r[0].result != scheduler.ResultCancelled {
		t.Errorf("result %q, want cancelled", r[0].result)
	}
	if who := h.heldBy("g"); who != "" {
		t.Errorf("lock held by %q after the stop", who)
	}
}

// A job that starts once the grace has ended (its try-lock-tick, a
// request on the wire that the shutdown could not cut short, was granted
// after it) starts cancelled, and is reported as cancelled: the end of the
// grace reaches every run, not only those running as it ends.
func TestRunStartingAfterTheGraceStartsCancelled(t *testing.T) {
	job := newBlockingJob()
	s := sched("late", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Hour // the lease outlives the grace
	h := newHarness(t, scheduler.Options{ShutdownGrace: 10 * time.Second}, s)
	h.start()
	asking, answer := make(chan struct{}), make(chan struct{})
	h.locker.mu.Lock()
	h.locker.deaf = true
	var once sync.Once
	h.locker.onTry = func() { once.Do(func() { close(asking) }); <-answer }
	h.locker.mu.Unlock()
	h.clock.Advance(time.Minute)
	select {
	case <-asking:
	case <-time.After(waitTimeout):
		t.Fatal("the tick never asked for its lock")
	}
	h.cancel()
	h.logs.waitFor(t, slog.LevelInfo, "shutting down")
	h.clock.Advance(10 * time.Second)
	h.logs.waitFor(t, slog.LevelWarn, "shutdown grace ran out: cancelling running jobs")
	close(answer)
	job.waitStarted(t)
	if cause := job.waitEnded(t); cause == nil {
		t.Fatal("a job starting after the grace ended ran uncancelled")
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	h.cancel = nil
	if r := h.rec.waitRuns(t, 1); r[0].result != scheduler.ResultCancelled {
		t.Errorf("result %q, want cancelled", r[0].result)
	}
	if who := h.heldBy("late"); who != "" {
		t.Errorf("lock held by %q after the stop", who)
	}
}

// A tick mark far ahead of the backend's clock stops the schedule until
// then: every tick is answered done. The node says so once, at error
// level, naming the schedule and the time the mark says, and again only
// after a grant (a later incident); the skips stay contended, at debug.
func TestMarkAheadOfTheBackendIsLoggedOnce(t *testing.T) {
	const msg = "tick mark ahead of the lock backend's clock: no tick of this schedule will run before the time it says"
	ran := make(chan scheduler.Tick, 10)
	h := newHarness(t, scheduler.Options{MaxClockSkew: time.Second},
		sched("s", "* * * * * *", hints.RequireGlobal, scheduler.JobFunc(func(_ context.Context, tk scheduler.Tick) error { ran <- tk; return nil })))
	ahead := t0.Add(time.Hour)
	ans, err := h.peer.TryLockTick(context.Background(), locking.TickRequest{Key: "s", Tick: ahead, TTL: time.Minute,
		MaxSkew: 2 * time.Hour, Window: time.Minute})
	if err != nil || ans.Handle == nil {
		t.Fatalf("raising the mark: %v, %v", ans.Verdict, err)
	}
	if err := h.peer.Release(context.Background(), ans.Handle); err != nil {
		t.Fatal(err)
	}
	h.start()
	for range 3 {
		h.step(time.Second)
	}
	if n := h.logs.count(slog.LevelError, msg); n != 1 {
		t.Fatalf("%d error lines for a mark ahead over 3 ticks, want 1", n)
	}
	if got := h.logs.attr(msg, "mark"); got != ahead.Format(time.RFC3339Nano) || h.logs.attr(msg, "schedule") != "s" {
		t.Errorf("the line names schedule %q and mark %q, want s and %s", h.logs.attr(msg, "schedule"), got, ahead.Format(time.RFC3339Nano))
	}
	if len(ran) != 0 {
		t.Fatalf("a tick ran under a mark an hour ahead")
	}
}
