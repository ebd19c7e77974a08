package scheduler_test

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// Add and Remove change one schedule of a running scheduler, as a Reload
// of the set with it added or without it would.

func TestAddFiresFromNowAndRefusesWhatReloadRefuses(t *testing.T) {
	a := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("a", everyMinute, hints.NodeLocal, a)).start()
	b := &countingJob{}
	// Node-local: a locked schedule's mark is created by the recovery
	// goroutine, and one created after the clock moved would refuse the
	// tick (as after a Reload that adds it).
	if err := h.s.Add(sched("b", everyMinute, hints.NodeLocal, b)); err != nil {
		t.Fatalf("Add: %v", err)
	}
	h.loopParked()
	h.step(time.Minute)
	if n := len(b.got()); n != 1 {
		t.Fatalf("added schedule ran %d times after its tick, want 1", n)
	}
	if got := strings.Join(snapshotIDs(h.s), ","); got != "a,b" {
		t.Errorf("Snapshot IDs = %s, want a,b", got)
	}

	err := h.s.Add(sched("a", everyMinute, hints.NodeLocal, a))
	if !errors.Is(err, scheduler.ErrInvalid) || !errors.Is(err, scheduler.ErrDuplicateID) {
		t.Errorf("Add(live id) = %v, want ErrInvalid and ErrDuplicateID", err)
	}
	for _, bad := range []scheduler.Schedule{
		sched("", everyMinute, hints.NodeLocal, a),
		sched("c", "61 * * * *", hints.NodeLocal, a),
		sched("d", everyMinute, hints.NodeLocal, nil),
		sched("e", everyMinute, "everywhere", a),
	} {
		if err := h.s.Add(bad); !errors.Is(err, scheduler.ErrInvalid) {
			t.Errorf("Add(%q) = %v, want ErrInvalid", bad.ID, err)
		}
	}
	noBackend, err := scheduler.New(scheduler.Options{NodeID: "n", Clock: fakeclock.New(t0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = noBackend.Add(sched("g", everyMinute, hints.RequireGlobal, a))
	if !errors.Is(err, scheduler.ErrInvalid) || !errors.Is(err, hints.ErrNoBackend) {
		t.Errorf("Add(require_global, no backend) = %v, want ErrInvalid and hints.ErrNoBackend", err)
	}
	if got := strings.Join(snapshotIDs(h.s), ","); got != "a,b" {
		t.Errorf("after refused Adds, Snapshot IDs = %s, want a,b", got)
	}
}

func TestRemoveLetsTheRunningTickFinish(t *testing.T) {
	job := newBlockingJob()
	r := sched("r", everyMinute, hints.RequireGlobal, job)
	r.ExpectedRuntime = time.Hour
	other := &countingJob{}
	o := sched("o", everyMinute, hints.NodeLocal, other)
	o.Overlap = scheduler.OverlapAllow // its first run may still be ending at its second tick
	h := newHarness(t, scheduler.Options{}, r, o).start()
	h.clock.Advance(time.Minute)
	tk := job.waitStarted(t)

	if err := h.s.Remove("r"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := h.s.Remove("r"); !errors.Is(err, scheduler.ErrUnknownSchedule) {
		t.Errorf("second Remove = %v, want ErrUnknownSchedule", err)
	}
	if next := func() time.Time { h.rec.mu.Lock(); defer h.rec.mu.Unlock(); return h.rec.next["r"] }(); !next.IsZero() {
		t.Errorf("removed schedule's NextTick = %v, want zero", next)
	}
	if who := h.heldBy("r"); who != "node-a" {
		t.Fatalf("Remove dropped the running job's lock (held by %q)", who)
	}
	h.loopParked()
	h.clock.Advance(time.Minute) // r no longer fires; o does
	h.rec.waitRuns(t, 2)         // o's two ticks
	select {
	case err := <-job.ended:
		t.Fatalf("Remove ended the running job: %v", err)
	default:
	}
	close(job.release)
	runs := h.rec.waitRuns(t, 3)
	var rRuns int
	for _, run := range runs {
		if run.id == "r" {
			rRuns++
			if run.result != scheduler.ResultSuccess || !run.tick.Equal(tk.Time) {
				t.Errorf("removed schedule's run %+v did not finish normally", run)
			}
		}
	}
	if rRuns != 1 {
		t.Errorf("removed schedule ran %d times, want 1", rRuns)
	}
	h.idle()
	if who := h.heldBy("r"); who != "" {
		t.Errorf("r's lock still held by %q after its run", who)
	}
	if got := strings.Join(snapshotIDs(h.s), ","); got != "o" {
		t.Errorf("Snapshot IDs = %s, want o", got)
	}
	// Added back, it fires again.
	if err := h.s.Add(r); err != nil {
		t.Fatalf("Add after Remove: %v", err)
	}
	h.loopParked()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
}

// Reload compiles only what changed: a schedule given again with another
// job value runs the new job and keeps its next tick; one whose spec
// changed fires by the new spec; a duplicate of a live id is refused.
func TestReloadSwapsOnlyWhatChanged(t *testing.T) {
	first, second := &countingJob{}, &countingJob{}
	a := sched("a", everyMinute, hints.NodeLocal, first)
	b := sched("b", everyMinute, hints.NodeLocal, first)
	h := newHarness(t, scheduler.Options{}, a, b).start()
	nextA := h.s.Snapshot()[0].Next

	a2 := a
	a2.Job = second
	b2 := b
	b2.CronExpr = "*/2 * * * *"
	if err := h.s.Reload([]scheduler.Schedule{a2, b2}); err != nil {
		t.Fatal(err)
	}
	snap := h.s.Snapshot()
	if !snap[0].Next.Equal(nextA) {
		t.Errorf("a's next tick moved from %v to %v though only its job changed", nextA, snap[0].Next)
	}
	if want := t0.Add(2 * time.Minute); !snap[1].Next.Equal(want) {
		t.Errorf("b's next tick %v, want %v by its new spec", snap[1].Next, want)
	}
	h.loopParked()
	h.step(time.Minute)
	if n1, n2 := len(first.got()), len(second.got()); n1 != 0 || n2 != 1 {
		t.Errorf("after a's tick: old job ran %d, new job %d; want 0 and 1", n1, n2)
	}

	err := h.s.Reload([]scheduler.Schedule{a2, b2, a2})
	if !errors.Is(err, scheduler.ErrDuplicateID) || !strings.Contains(err.Error(), `schedule "a": duplicate id`) {
		t.Errorf("Reload with a live id twice = %v, want ErrDuplicateID naming a", err)
	}
	err = h.s.Reload([]scheduler.Schedule{a2, sched("c", everyMinute, hints.NodeLocal, first),
		sched("c", everyMinute, hints.NodeLocal, first)})
	if !errors.Is(err, scheduler.ErrDuplicateID) {
		t.Errorf("Reload with a new id twice = %v, want ErrDuplicateID", err)
	}
	if got := strings.Join(snapshotIDs(h.s), ","); got != "a,b" {
		t.Errorf("after refused Reloads, Snapshot IDs = %s, want a,b", got)
	}
	// The refused Reloads left the set whole: dropping b removes only b.
	if err := h.s.Reload([]scheduler.Schedule{a2}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(snapshotIDs(h.s), ","); got != "a" {
		t.Errorf("Snapshot IDs = %s, want a", got)
	}
}

// Reload first looks for each schedule where the last set had it: a set
// reordered, shortened in the middle, or changed by Add and Remove in
// between must still come out exactly as given.
func TestReloadFindsSchedulesWhereverTheyMoved(t *testing.T) {
	job := &countingJob{}
	var set []scheduler.Schedule
	for _, id := range strings.Split("a b c d e f g h", " ") {
		set = append(set, sched(id, everyMinute, hints.NodeLocal, job))
	}
	h := newHarness(t, scheduler.Options{}, set...).start()
	reload := func(ids string, want string) {
		t.Helper()
		var next []scheduler.Schedule
		for _, id := range strings.Fields(ids) {
			next = append(next, sched(id, everyMinute, hints.NodeLocal, job))
		}
		if err := h.s.Reload(next); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(snapshotIDs(h.s), " "); got != want {
			t.Fatalf("after Reload(%s): schedules %s, want %s", ids, got, want)
		}
	}
	reload("a b d e f g h", "a b d e f g h")     // one taken out
	reload("h g f e d b a x", "a b d e f g h x") // reversed, one added
	reload("h g e b a x", "a b e g h x")         // two taken out, apart
	if err := h.s.Remove("g"); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Add(sched("g", everyMinute, hints.NodeLocal, job)); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Add(sched("y", everyMinute, hints.NodeLocal, job)); err != nil {
		t.Fatal(err)
	}
	reload("h e b a x y", "a b e h x y") // g, added back by Add, taken out
	reload("h e b a x y g", "a b e g h x y")
	reload("h e b a", "a b e h") // the end taken out
	h.rec.mu.Lock()
	for _, id := range []string{"c", "d", "f", "g", "x", "y"} {
		if n, ok := h.rec.next[id]; !ok || !n.IsZero() {
			t.Errorf("schedule %s taken out: last NextTick %v (reported %v), want zero", id, n, ok)
		}
	}
	h.rec.mu.Unlock()
	h.loopParked()
	h.step(time.Minute)
	if n := len(job.got()); n != 4 {
		t.Errorf("%d runs at the next tick, want one for each of the 4 schedules", n)
	}
}

// aheadClock reads ahead of the fake clock its timers run on: its Now is
// past a tick the loop's timer has not fired for yet, the instant at which
// a Reload can race the loop.
type aheadClock struct {
	*fakeclock.Clock
	ahead atomic.Int64
}

func (c *aheadClock) Now() time.Time { return c.Clock.Now().Add(time.Duration(c.ahead.Load())) }

// A Reload that changes a schedule's spec while one of its ticks is due
// but not yet taken by the loop keeps that tick when the new spec has it
// too: rescheduled from now, it was lost (it belongs to neither the old
// definition, which no longer fires, nor the new one, which fired "from
// now on"). A tick the new spec does not have is not invented.
func TestReloadKeepsADueTickTheNewSpecHasToo(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       []time.Time
	}{
		{"new spec has the tick", "*/2 * * * *", []time.Time{t0.Add(2 * time.Minute)}},
		{"new spec lacks it", "*/3 * * * *", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &countingJob{}
			clock := &aheadClock{Clock: fakeclock.New(t0)}
			a := sched("a", everyMinute, hints.NodeLocal, job)
			h := newHarness(t, scheduler.Options{Clock: clock}, a)
			h.clock = clock.Clock
			h.start()
			h.step(time.Minute) // t0+1m: ran
			if n := len(job.got()); n != 1 {
				t.Fatalf("ran %d times before the reload, want 1", n)
			}
			// The tick at t0+2m is due by the clock the scheduler reads,
			// its timer not fired yet: the loop has not taken it.
			clock.ahead.Store(int64(time.Minute + 10*time.Millisecond))
			a2 := a
			a2.CronExpr = tc.spec
			if err := h.s.Reload([]scheduler.Schedule{a2}); err != nil {
				t.Fatal(err)
			}
			h.idle()
			var got []time.Time
			for _, tk := range job.got()[1:] {
				got = append(got, tk.Time)
			}
			if !slices.EqualFunc(got, tc.want, time.Time.Equal) {
				t.Errorf("ticks run after the reload: %v, want %v", got, tc.want)
			}
		})
	}
}
