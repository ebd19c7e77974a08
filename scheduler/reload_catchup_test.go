package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// Reload of a schedule whose timing changed: the tick of its new spec that
// is due at the reload runs once, and an earlier one within its catch-up
// window that nobody ran is caught up, as at start.

const (
	every2Minutes = "0 */2 * * * *"
	every3Minutes = "0 */3 * * * *"
)

// asked counts the try-lock-ticks h's node sent for id's tick.
func (h *harness) asked(id string, tick time.Time) int {
	h.locker.mu.Lock()
	defer h.locker.mu.Unlock()
	n := 0
	for _, r := range h.locker.reqs {
		if r.Key == id && r.Tick.Equal(tick) {
			n++
		}
	}
	return n
}

// withSpec is sc with another cron expression.
func withSpec(sc scheduler.Schedule, expr string) scheduler.Schedule {
	sc.CronExpr = expr
	return sc
}

// The new spec has a tick at the reload's instant (or within
// max_clock_skew before it, on time) that the old one did not: it runs
// once, whatever the hint; it was dropped (the new spec fired from "now
// on", strictly after now).
func TestReloadRunsTheChangedSchedulesTickDueAtTheReload(t *testing.T) {
	t.Parallel()
	tick := t0.Add(2 * time.Minute) // every3Minutes lacks it, every2Minutes has it
	for _, hint := range []hints.Hint{hints.NodeLocal, hints.RequireGlobal} {
		for _, after := range []time.Duration{0, 500 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v after it", hint, after), func(t *testing.T) {
				t.Parallel()
				job := &countingJob{}
				sc := sched("c", every3Minutes, hint, job)
				h := newHarness(t, scheduler.Options{}, sc).start()
				h.step(tick.Add(after).Sub(t0))
				if err := h.s.Reload([]scheduler.Schedule{withSpec(sc, every2Minutes)}); err != nil {
					t.Fatal(err)
				}
				h.idle()
				if n, _ := runsOf(job, "c", tick); n != 1 {
					t.Errorf("the new spec's tick %v, due at the reload, ran %d times; want once", tick, n)
				}
				// Fired by the loop, not also tried by the catch-up.
				if asked := h.asked("c", tick); hint == hints.RequireGlobal && asked != 1 {
					t.Errorf("try-lock-tick asked %d times for the tick due at the reload, want once", asked)
				}
				h.step(t0.Add(4 * time.Minute).Sub(h.clock.Now()))
				if n, _ := runsOf(job, "c", t0.Add(4*time.Minute)); n != 1 {
					t.Errorf("the next tick ran %d times, want once", n)
				}
			})
		}
	}
}

// A node-local schedule has no catch-up: a tick of its new spec that is
// late (beyond max_clock_skew) at the reload is not invented.
func TestReloadInventsNoLateNodeLocalTick(t *testing.T) {
	t.Parallel()
	job := &countingJob{}
	sc := sched("c", every3Minutes, hints.NodeLocal, job)
	h := newHarness(t, scheduler.Options{}, sc).start()
	h.step(2*time.Minute + 30*time.Second)
	if err := h.s.Reload([]scheduler.Schedule{withSpec(sc, every2Minutes)}); err != nil {
		t.Fatal(err)
	}
	h.idle()
	if got := job.got(); len(got) != 0 {
		t.Errorf("runs %v after the reload, want none before the next tick", got)
	}
}

// A locked schedule whose spec changed gets the catch-up a start gets: the
// latest tick of its new spec within its catch-up window that this node
// did not see decided is tried once, and the mark decides. Two nodes on
// one lock table: y's tick t0+2m was run by no one (both had every3Minutes)
// and is caught up once; x's was run by node-b (already on the new spec)
// and is not run again; z's was run by the old definition and is not
// tried again.
func TestReloadCatchesUpTheChangedSchedule(t *testing.T) {
	t.Parallel()
	job := &countingJob{}
	x := sched("x", every3Minutes, hints.RequireGlobal, job)
	y := sched("y", every3Minutes, hints.RequireGlobal, job)
	z := sched("z", everyMinute, hints.RequireGlobal, job)
	clock := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(clock.Now))
	node := func(id string, scheds ...scheduler.Schedule) *harness {
		h := newHarness(t, scheduler.Options{Clock: clock, NodeID: id, Locker: &faulty{inner: mem.Peer(id)},
			Backend: hints.Distributed}, scheds...)
		h.mem = mem
		return h.start()
	}
	a := node("node-a", x, y, z)
	b := node("node-b", withSpec(x, every2Minutes), y, z)
	tick := t0.Add(2 * time.Minute)
	for _, d := range []time.Duration{2 * time.Minute, 30 * time.Second} {
		clock.Advance(d)
		a.idle()
		b.idle()
	}
	if n, _ := runsOf(job, "x", tick); n != 1 {
		t.Fatalf("x's tick %v ran %d times on node-b's new spec, want once", tick, n)
	}
	if err := a.s.Reload([]scheduler.Schedule{withSpec(x, every2Minutes), withSpec(y, every2Minutes),
		withSpec(z, every2Minutes)}); err != nil {
		t.Fatal(err)
	}
	a.idle()
	b.idle()
	for _, c := range []struct {
		id   string
		want int
	}{{"x", 1}, {"y", 1}, {"z", 1}} {
		if n, nodes := runsOf(job, c.id, tick); n != c.want {
			t.Errorf("%s's tick %v ran %d times (on %v), want %d", c.id, tick, n, nodes, c.want)
		}
	}
	if n, nodes := runsOf(job, "y", tick); n == 1 && nodes[0] != "node-a" {
		t.Errorf("y's tick ran on %s, want node-a's catch-up", nodes[0])
	}
}
