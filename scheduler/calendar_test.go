package scheduler_test

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// calendarSched is sched with its spec under cal.
func calendarSched(t *testing.T, id, expr string, cal cronspec.Calendar, job scheduler.Job) scheduler.Schedule {
	t.Helper()
	spec, err := cronspec.Parse(expr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec, err = cronspec.WithCalendar(spec, cal); err != nil {
		t.Fatal(err)
	}
	s := sched(id, expr, hints.PreferGlobal, job)
	s.Spec = spec
	return s
}

func tickTimes(j *countingJob) []string {
	var out []string
	for _, tk := range j.got() {
		out = append(out, tk.Time.UTC().Format(time.RFC3339))
	}
	return out
}

func sameList(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An excepted date does not fire, and records no skip (it is no tick);
// the next date fires on time, its previous tick the one before the
// holiday.
func TestExceptedDateDoesNotFire(t *testing.T) {
	j := &countingJob{}
	s := calendarSched(t, "nightly", "0 3 * * *", cronspec.Calendar{Except: []string{"2026-01-02"}}, j)
	h := newHarness(t, scheduler.Options{}, s).start()
	h.loopParked()
	h.step(3 * time.Hour) // 2026-01-01 03:00
	if got, want := tickTimes(j), []string{"2026-01-01T03:00:00Z"}; !sameList(got, want) {
		t.Fatalf("after the 1st: ran %v, want %v", got, want)
	}
	if next := h.s.Snapshot()[0].Next; !next.Equal(t0.Add(51 * time.Hour)) {
		t.Errorf("next tick %v, want the 3rd at 03:00 (the 2nd excepted)", next)
	}
	h.loopParked()
	h.step(24 * time.Hour) // the 2nd, 03:00: excepted
	h.loopParked()
	h.step(24 * time.Hour) // the 3rd, 03:00
	if got, want := tickTimes(j), []string{"2026-01-01T03:00:00Z", "2026-01-03T03:00:00Z"}; !sameList(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if prev := j.got()[1].PrevTime; !prev.Equal(t0.Add(3 * time.Hour)) {
		t.Errorf("the 3rd's previous tick %v, want the 1st's", prev)
	}
	if _, skipped, _ := h.rec.snapshot(); len(skipped) != 0 {
		t.Errorf("skips recorded: %+v, want none", skipped)
	}
}

// Start and end bound the firing, both included; a schedule already ended
// is accepted and never fires.
func TestStartEndBoundFiring(t *testing.T) {
	j, over := &countingJob{}, &countingJob{}
	s := calendarSched(t, "bounded", "0 * * * *", cronspec.Calendar{
		Start: t0.Add(2 * time.Hour), End: t0.Add(4 * time.Hour),
	}, j)
	ended := calendarSched(t, "ended", "0 * * * *", cronspec.Calendar{End: t0.Add(-time.Hour)}, over)
	h := newHarness(t, scheduler.Options{}, s, ended).start()
	for range 6 {
		h.loopParked()
		h.step(time.Hour)
	}
	want := []string{"2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z", "2026-01-01T04:00:00Z"}
	if got := tickTimes(j); !sameList(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
	if got := over.got(); len(got) != 0 {
		t.Errorf("an ended schedule ran %d times", len(got))
	}
	for _, st := range h.s.Snapshot() {
		if !st.Next.IsZero() {
			t.Errorf("%s: next tick %v after its end", st.ID, st.Next)
		}
	}
}

// A reload that excepts the date of the next tick moves it: the
// expression, zone and spread are unchanged, the calendar is not.
func TestReloadWithExceptMovesTheNextTick(t *testing.T) {
	j := &countingJob{}
	plain := sched("nightly", "0 3 * * *", hints.PreferGlobal, j)
	h := newHarness(t, scheduler.Options{}, plain).start()
	if err := h.s.Reload([]scheduler.Schedule{calendarSched(t, "nightly", "0 3 * * *", cronspec.Calendar{Except: []string{"2026-01-01"}}, j)}); err != nil {
		t.Fatal(err)
	}
	if next := h.s.Snapshot()[0].Next; !next.Equal(t0.Add(27 * time.Hour)) {
		t.Errorf("next tick %v after the reload, want the 2nd at 03:00", next)
	}
	h.loopParked()
	h.step(3 * time.Hour)
	if got := j.got(); len(got) != 0 {
		t.Errorf("ran on the excepted date: %v", tickTimes(j))
	}
}
