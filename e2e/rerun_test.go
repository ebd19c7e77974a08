package e2e

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// TestRerunOnNodeLoss is the e2e of on_node_loss = "rerun" (issue 32): a
// node killed -9 in the middle of a run of a rerun schedule (every 30s,
// runs of 20s) leaves its run's provisional record; once the node is gone
// from the registry and its lease has ended, one other node runs that
// tick again, once, within the tick's window, while the schedule's next
// tick has not come. On Redis and Postgres.
func TestRerunOnNodeLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		c := startCluster(t, b, Spec{Nodes: 3, Cron: "*/30 * * * * *", OnNodeLoss: "rerun",
			JobSleep: 20 * time.Second, ExpectedRuntime: 5 * time.Second})
		holder, run := c.Holder(70 * time.Second)
		k := c.KillHolder(holder, run)
		ofTick := func(runs []ledger.Run) []ledger.Run {
			var out []ledger.Run
			for _, r := range runs {
				if r.Schedule == globalID && r.Tick.Equal(run.Tick) {
					out = append(out, r)
				}
			}
			return out
		}
		runs := c.WaitRuns("the lost run re-run on another node, to its end", 60*time.Second, func(runs []ledger.Run) bool {
			for _, r := range ofTick(runs) {
				if r.Node != holder.ID && r.Ending != "" {
					return true
				}
			}
			return false
		})
		var again ledger.Run
		for _, r := range ofTick(runs) {
			if r.Node != holder.ID {
				again = r
			}
		}
		t.Logf("%s: tick %s lost on %s at %s, re-run on %s %v after the kill", b.Kind, run.Tick.UTC().Format("15:04:05"),
			holder.ID, k.at.UTC().Format("15:04:05.000"), again.Node, again.Start.Sub(k.at).Round(time.Millisecond))
		if again.Ending != ledger.Accepted || again.Begin != ledger.Accepted || again.Fence <= run.Fence {
			t.Errorf("the re-run %+v: want it to run cleanly, under a higher fence than the lost run's %d", again, run.Fence)
		}
		// Once: the next tick comes and goes, and the lost tick still has
		// its lost run and one re-run.
		next := run.Tick.Add(30 * time.Second)
		c.WaitRuns("the next tick's run", 60*time.Second, func(runs []ledger.Run) bool {
			for _, r := range runs {
				if r.Tick.After(run.Tick) && r.Start.After(next) {
					return true
				}
			}
			return false
		})
		all := ofTick(ledger.Runs(c.Records()))
		if len(all) != 2 {
			t.Errorf("%d runs of the lost tick, want 2 (the lost one, one re-run):\n%s", len(all), describeRuns(all))
		}
		rep := ledger.Check(c.Records(), globalID, ledger.Window{})
		if rep.OverlapsClean > 0 {
			t.Errorf("%d overlapping runs both with every write accepted:\n%v", rep.OverlapsClean, rep.Doubles)
		}
	})
}
