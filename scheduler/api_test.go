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

// New, Reload and Snapshot.

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
	// The loop re-arms after Reload; r's run keeps idle from helping.
	h.loopParked()
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
		{ID: "overlap", CronExpr: "@hourly", Overlap: "stack", Job: job},
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
		`schedule "badcron"`, `schedule "never"`, `"nojob": no job`, `"overlap": overlap "stack"`,
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
var _ scheduler.Locker = (interface {
	locking.Locker
	locking.TickLocker
})(nil)
