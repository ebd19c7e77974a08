package e2e

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// eachBackend runs f once per distributed backend, in parallel subtests,
// each with a backend of its own.
func eachBackend(t *testing.T, f func(t *testing.T, b *Backend)) {
	t.Parallel()
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, newBackend(t, kind))
		})
	}
}

// window spans the ticks from the second after from to the second before
// to: the ticks that certainly fell while the cluster was watched.
func window(from, to time.Time) ledger.Window {
	return ledger.Window{From: from.Truncate(every).Add(every), To: to.Truncate(every).Add(-every), Every: every}
}

// check reports the global schedule over w and the node_local one, logs
// them, and fails t on any double run of the node_local schedule.
func check(t *testing.T, c *Cluster, w ledger.Window) ledger.Report {
	t.Helper()
	recs := c.Records()
	rep := ledger.Check(recs, globalID, w)
	t.Logf("%s: ticks %d, runs %d, double runs %d (%d uncaught), missed %d, overlaps %d (%d uncaught), refused %d, cancelled %d, unfinished %d; runs per node %v",
		c.Backend.Kind, rep.Ticks, rep.Runs, rep.DoubleRuns, rep.DoubleClean, rep.Missed, rep.Overlaps,
		rep.OverlapsClean, rep.Refused, rep.Cancelled, rep.Unfinished, ledger.NodesOf(recs, globalID))
	for _, d := range rep.Doubles {
		t.Log(d)
	}
	if lr := ledger.CheckLocal(recs, localID); lr.Doubles > 0 {
		t.Errorf("node_local schedule: %d (node, tick) pairs ran twice", lr.Doubles)
	}
	return rep
}

// noDoubles fails t if any tick ran twice or any two runs overlapped.
func noDoubles(t *testing.T, rep ledger.Report) {
	t.Helper()
	if rep.DoubleRuns > 0 || rep.Overlaps > 0 {
		t.Errorf("%d ticks ran more than once and %d pairs of runs overlapped; want none", rep.DoubleRuns, rep.Overlaps)
	}
}

// TestBackendDoneWhen_ThreeNodesRunEachTickOnceOthersContended is the
// "Done when" of the Redis and Postgres backend issues: three nodes, a
// require_global schedule every second; each tick runs once, and the nodes
// that do not run it count it as contended.
func TestBackendDoneWhen_ThreeNodesRunEachTickOnceOthersContended(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		c := startCluster(t, b, Spec{Nodes: 3, MaxClockSkew: time.Second})
		c.WaitTicks(1, 30*time.Second)
		before := map[string]float64{}
		for _, n := range c.Nodes() {
			before[n.ID] = n.Counter("bext_scheduler_ticks_skipped_total", "schedule", globalID, "reason", "contended")
		}
		from := time.Now()
		c.WaitTicks(10, 30*time.Second)
		to := time.Now()

		rep := check(t, c, window(from, to))
		noDoubles(t, rep)
		noMisses(t, c, rep) // but those a backend too slow to answer explains
		ran := ledger.NodesOf(c.Records(), globalID)
		for _, n := range c.Nodes() {
			d := n.Counter("bext_scheduler_ticks_skipped_total", "schedule", globalID, "reason", "contended") - before[n.ID]
			t.Logf("%s: contended +%v, runs %d", n.ID, d, ran[n.ID])
			if ran[n.ID] == 0 && d < 3 {
				t.Errorf("%s ran nothing but counted only %v contended ticks over ~10 ticks", n.ID, d)
			}
		}
	})
}
