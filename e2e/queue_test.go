package e2e

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// TestQueueRunsWaitingTicksOnce is the e2e of overlap = "queue" (issue
// 32): three nodes, a require_global schedule every 2s whose runs last 3s.
// Each tick that fires while a run goes on waits (on every node) and
// runs as soon as the lock is free: runs follow one another, never
// overlap, each tick runs at most once, and the waiting ticks did run
// (under skip, each run would start within a fraction of a second of its
// tick, and every other tick would be skipped).
func TestQueueRunsWaitingTicksOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		c := startCluster(t, b, Spec{Nodes: 3, Cron: "*/2 * * * * *", Overlap: "queue",
			JobSleep: 3 * time.Second, ExpectedRuntime: 4 * time.Second, CatchupWindow: 6 * time.Second})
		from := time.Now()
		runs := c.WaitRuns("six runs", 60*time.Second, func(runs []ledger.Run) bool {
			ended := 0
			for _, r := range runs {
				if r.Ending != "" {
					ended++
				}
			}
			return ended >= 6
		})
		rep := ledger.Check(c.Records(), globalID, ledger.Window{})
		if rep.DoubleRuns > 0 || rep.Overlaps > 0 {
			t.Errorf("%d ticks run twice, %d overlapping runs:\n%v", rep.DoubleRuns, rep.Overlaps, rep.Doubles)
		}
		waited := 0
		for _, r := range runs {
			if r.Start.Before(from) {
				continue
			}
			if r.Start.Sub(r.Tick) >= 500*time.Millisecond {
				waited++
			}
		}
		t.Logf("%s: %d runs, %d of them of a tick that waited for the run before it", b.Kind, len(runs), waited)
		if waited < 2 {
			t.Errorf("only %d runs started 500ms or more after their tick: the ticks that found a run going did not wait for it:\n%s",
				waited, describeRuns(runs))
		}
	})
}

// TestReplaceStopsTheRunningRun is the e2e of overlap = "replace": three
// nodes, a require_global schedule every 3s whose runs would last 20s.
// Each tick stops the run in progress (SIGTERM: the ledger shows it
// cancelled, the node counts it replaced) and runs once it has given its
// lock back: runs never overlap, each tick runs at most once, and each
// run starts soon after its tick.
func TestReplaceStopsTheRunningRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		c := startCluster(t, b, Spec{Nodes: 3, Cron: "*/3 * * * * *", Overlap: "replace",
			JobSleep: 20 * time.Second, ExpectedRuntime: 4 * time.Second})
		runs := c.WaitRuns("four replaced runs", 60*time.Second, func(runs []ledger.Run) bool {
			n := 0
			for _, r := range runs {
				if r.Ending == ledger.Cancelled {
					n++
				}
			}
			return n >= 4
		})
		rep := ledger.Check(c.Records(), globalID, ledger.Window{})
		if rep.DoubleRuns > 0 || rep.Overlaps > 0 {
			t.Errorf("%d ticks run twice, %d overlapping runs:\n%v", rep.DoubleRuns, rep.Overlaps, rep.Doubles)
		}
		replaced := 0.0
		for _, n := range c.Nodes() {
			replaced += n.Counter("bext_scheduler_runs_total", "schedule", globalID, "result", "replaced")
		}
		late := 0
		for _, r := range runs {
			if r.Start.Sub(r.Tick) > 2*time.Second {
				late++
			}
		}
		t.Logf("%s: %d runs, %v counted replaced, %d started more than 2s after their tick", b.Kind, len(runs), replaced, late)
		if replaced < 3 {
			t.Errorf("%v runs counted replaced, want at least 3:\n%s", replaced, describeRuns(runs))
		}
		if late > 0 {
			t.Errorf("%d runs started more than 2s after their tick: the replacing tick waited for the run instead of stopping it:\n%s",
				late, describeRuns(runs))
		}
	})
}
