package scheduler_test

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// TestTickTimeInTheClocksZone: a tick's time is given in the zone of the
// scheduler's clock, whatever zone its spec fires in, as before the next
// tick was read back from the heap (04a6d62) and as a catch-up tick's
// still is: BEXT_TICK_TIME and the HTTP tick header print it, and a
// script that cuts its date off the string must not get another day.
func TestTickTimeInTheClocksZone(t *testing.T) {
	j := &countingJob{}
	h := newHarness(t, scheduler.Options{},
		sched("z", "CRON_TZ=America/New_York 0 * * * * *", hints.NodeLocal, j)).start()
	h.step(time.Minute)
	got := j.got()
	if len(got) == 0 {
		t.Fatal("no run")
	}
	last := got[len(got)-1]
	if s, want := last.Time.Format(time.RFC3339), "2026-01-01T00:01:00Z"; s != want {
		t.Errorf("tick time %s, want %s (the clock's zone)", s, want)
	}
	for _, st := range h.s.Snapshot() {
		if st.Next.Location() != t0.Location() {
			t.Errorf("Snapshot Next %v in %v, want the clock's zone %v", st.Next, st.Next.Location(), t0.Location())
		}
	}
}
