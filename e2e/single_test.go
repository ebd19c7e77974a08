package e2e

import (
	"regexp"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// TestSingleNodeStoppedAcrossTickRunsItLate is the single-node
// proof: one node on the memory backend, a require_global schedule, the
// process stopped with SIGSTOP for 3s across a tick, then continued. The
// tick runs late, once, and nothing is skipped as backend_error (the old
// claim skipped a tick handled more than max_clock_skew late as
// backend_error and fired the critical alert for a backend that never
// failed).
//
// The schedule is `*/10 * * * * *`: its catch-up window is the default,
// one period, so 10s, which covers the 3s stop (an every-second schedule's
// window, 1s, would not: its tick would rightly be skipped as missed).
func TestSingleNodeStoppedAcrossTickRunsItLate(t *testing.T) {
	t.Parallel()
	const period = 10 * time.Second
	b := newBackend(t, "memory")
	c := startCluster(t, b, Spec{Nodes: 1, Cron: "*/10 * * * * *"})
	n := c.Nodes()[0]
	// The first tick at least 2s away, so the stop begins 1.5s before it.
	tick := time.Now().Add(2 * time.Second).Truncate(period).Add(period)
	stopAt := tick.Add(-1500 * time.Millisecond)
	wait := time.NewTimer(time.Until(stopAt)) // a wall-clock instant: the fault's timing
	<-wait.C
	groups := n.Pause(false)
	stopped := time.Now()
	hold := time.NewTimer(3 * time.Second) // the fault's length, by design
	<-hold.C
	n.Resume(groups)
	resumed := time.Now()
	t.Logf("node stopped %s..%s across tick %s", stopped.UTC().Format("15:04:05.000"),
		resumed.UTC().Format("15:04:05.000"), tick.UTC().Format("15:04:05"))

	runs := c.WaitRuns("the late run of tick "+tick.UTC().Format("15:04:05"), 20*time.Second, func(runs []ledger.Run) bool {
		for _, r := range runs {
			if r.Tick.Equal(tick) && r.Ending != "" {
				return true
			}
		}
		return false
	})
	var late []ledger.Run
	for _, r := range runs {
		if r.Tick.Equal(tick) {
			late = append(late, r)
		}
	}
	if len(late) != 1 {
		t.Fatalf("tick %s ran %d times; want once:\n%s", tick.UTC().Format("15:04:05"), len(late), describeRuns(late))
	}
	r := late[0]
	t.Logf("tick %s ran %v late, ended %s", tick.UTC().Format("15:04:05"), r.Start.Sub(tick), r.Ending)
	if r.Start.Before(resumed.Add(-100*time.Millisecond)) || r.Ending != ledger.Accepted {
		t.Errorf("the run began at %s (resumed at %s) and ended %q; want a late run after the resume that succeeds",
			r.Start.UTC().Format("15:04:05.000"), resumed.UTC().Format("15:04:05.000"), r.Ending)
	}
	// The node itself says it ran late and skipped nothing.
	n.Proc().WaitLog(regexp.MustCompile(`msg="tick ran".* schedule=`+globalID+` tick=`+
		regexp.QuoteMeta(tick.UTC().Format(time.RFC3339))+` outcome=success .* late=`), 10*time.Second)
	for _, why := range []string{"backend_error", "missed"} {
		if v := n.Counter("bext_scheduler_ticks_skipped_total", "schedule", globalID, "reason", why); v != 0 {
			t.Errorf("bext_scheduler_ticks_skipped_total{reason=%q} = %v; want 0", why, v)
		}
	}
	if s := c.SkippedTicks("backend_error", "missed"); len(s) > 0 {
		t.Errorf("the node logged global ticks skipped for backend_error or missed: %v", s)
	}
}
