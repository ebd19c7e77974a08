package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

func targeted(sc scheduler.Schedule, nodes ...string) scheduler.Schedule {
	sc.Nodes = nodes
	return sc
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		nodes, tags []string
		want        bool
	}{
		{nil, nil, true},
		{nil, []string{"role=db"}, true},
		{[]string{"role=db"}, nil, false},
		{[]string{"role=db"}, []string{"zone=a", "role=db"}, true},
		{[]string{"role=db", "zone=a"}, []string{"role=db"}, false}, // every one, not any
		{[]string{"role=db", "zone=a"}, []string{"zone=a", "role=db"}, true},
		{[]string{"role=db"}, []string{"role=dbx", "role"}, false}, // exact strings
	} {
		if got := scheduler.Matches(tc.nodes, tc.tags); got != tc.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", tc.nodes, tc.tags, got, tc.want)
		}
	}
}

// A targeted schedule fires on a node that has every tag it names and
// never on one that lacks one: no ask, no skip recorded, no next tick.
// An untargeted schedule fires on both.
func TestTargetedScheduleFiresOnlyOnMatchingNodes(t *testing.T) {
	for _, hint := range []hints.Hint{hints.RequireGlobal, hints.NodeLocal} {
		t.Run(string(hint), func(t *testing.T) {
			dbJob, bothJob, zoneJob := &countingJob{}, &countingJob{}, &countingJob{}
			scheds := func(db, both, zone *countingJob) []scheduler.Schedule {
				return []scheduler.Schedule{
					targeted(sched("db", everyMinute, hint, db), "role=db"),
					sched("both", everyMinute, hint, both),
					targeted(sched("zone", everyMinute, hint, zone), "role=db", "zone=b"),
				}
			}
			db := newHarness(t, scheduler.Options{Tags: []string{"zone=a", "role=db"}}, scheds(dbJob, bothJob, zoneJob)...).start()
			webDB, webBoth, webZone := &countingJob{}, &countingJob{}, &countingJob{}
			web := newHarness(t, scheduler.Options{Clock: db.clock, NodeID: "node-b", Tags: []string{"role=web"}},
				scheds(webDB, webBoth, webZone)...).start()
			for range 3 {
				db.loopParked()
				web.loopParked()
				db.step(time.Minute)
				web.idle()
			}
			if n := len(dbJob.got()); n != 3 {
				t.Errorf("db ran %d times on the role=db node, want 3", n)
			}
			if n := len(webDB.got()); n != 0 {
				t.Errorf("db ran %d times on the role=web node, want 0", n)
			}
			if a, b := len(bothJob.got()), len(webBoth.got()); a != 3 || b != 3 {
				t.Errorf("the untargeted schedule ran %d and %d times, want 3 on each node", a, b)
			}
			if a, b := len(zoneJob.got()), len(webZone.got()); a != 0 || b != 0 {
				t.Errorf("a schedule for role=db in zone=b ran %d, %d times; no node has both tags", a, b)
			}
			for _, tick := range []time.Time{t0.Add(time.Minute), t0.Add(3 * time.Minute)} {
				if n := web.asked("db", tick); n != 0 {
					t.Errorf("the role=web node asked for db's tick %v %d times", tick, n)
				}
			}
			if _, skipped, _ := web.rec.snapshot(); len(skipped) != 0 {
				t.Errorf("the role=web node recorded skips %+v: a tick it does not own is no tick of its", skipped)
			}
			for _, st := range web.s.Snapshot() {
				if st.ID == "db" && !st.Next.IsZero() {
					t.Errorf("db's next tick on the role=web node is %v, want none", st.Next)
				}
			}
		})
	}
}

// A reload that targets a schedule at this node starts it at its next
// tick; one that targets it away stops it.
func TestReloadRetargets(t *testing.T) {
	job := &countingJob{}
	s := sched("r", everyMinute, hints.RequireGlobal, job)
	h := newHarness(t, scheduler.Options{Tags: []string{"role=db"}}, targeted(s, "role=web")).start()
	h.loopParked()
	h.step(time.Minute)
	if n := len(job.got()); n != 0 {
		t.Fatalf("ran %d times while targeted at role=web", n)
	}
	if err := h.s.Reload([]scheduler.Schedule{targeted(s, "role=db")}); err != nil {
		t.Fatal(err)
	}
	h.loopParked()
	h.step(time.Minute)
	if got := job.got(); len(got) != 1 || !got[0].Time.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("after targeting this node: runs %+v, want the tick at 00:02", got)
	}
	if err := h.s.Reload([]scheduler.Schedule{targeted(s, "role=web")}); err != nil {
		t.Fatal(err)
	}
	h.loopParked()
	h.step(time.Minute)
	if n := len(job.got()); n != 1 {
		t.Fatalf("ran %d times, want still 1 after targeting it away", n)
	}
}

// A manual run of a schedule targeted elsewhere is refused: a node whose
// tags match takes it.
func TestManualRunOfScheduleTargetedElsewhere(t *testing.T) {
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{Tags: []string{"role=web"}},
		targeted(sched("m", "0 3 * * *", hints.RequireGlobal, job), "role=db")).start()
	lk, err := h.mem.TryLock(context.Background(), "m", time.Minute)
	if err != nil || lk == nil {
		t.Fatal(lk, err)
	}
	err = h.s.RunManual(scheduler.Manual{ID: "m", Tick: h.clock.Now(), RunID: "req", Handle: lk, Sent: h.clock.Now()})
	if !errors.Is(err, scheduler.ErrElsewhere) {
		t.Fatalf("RunManual = %v, want ErrElsewhere", err)
	}
	h.idle()
	if n := len(job.got()); n != 0 {
		t.Errorf("the job ran %d times", n)
	}
}
