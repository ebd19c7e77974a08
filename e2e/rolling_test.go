package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// The standing rolling-deploy test: three nodes, a
// require_global schedule every second whose job takes 20s, under
// overlap = "skip" (at most one run of the schedule in the cluster at any
// moment). Every node is restarted in turn (SIGTERM: the holder's job gets
// shutdown_grace, 5s, then is cancelled; the lock is released at once) and
// the holder is killed once (SIGKILL: its job dies with it, its lock lives
// until its lease ends). The ledger then shows no tick run twice, no two
// runs overlapping, no run begun elsewhere while the dead holder's lease
// lived, the fence strictly higher on every change of holder, and the
// schedule running again soon after each handover.
//
// TestRollingDeploy restarts each node once, then kills the holder; the
// full version (each node restarted twice around the kill) takes over a
// minute per backend and runs under `make cluster-test`
// (TestRollingDeployFull, build tag e2elong).
func TestRollingDeploy(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) { rollingDeploy(t, b, 1) })
}

// rollingJob is the deploy test's job length; the declaration matches it.
const rollingJob = 20 * time.Second

// rollingDeploy restarts every node in turn, rounds times; a SIGKILL of
// the holder comes after the first round.
func rollingDeploy(t *testing.T, b *Backend, rounds int) {
	c := startCluster(t, b, Spec{Nodes: 3, JobSleep: rollingJob, ExpectedRuntime: rollingJob, Overlap: "skip"})
	c.Holder(30 * time.Second)
	start := time.Now()
	var kills []kill
	var handovers []int // job pids of the runs whose holder was stopped
	for round := range rounds {
		for _, n := range c.Nodes() {
			h, run := c.Holder(30 * time.Second)
			n.Stop()
			if n == h {
				handovers = append(handovers, run.PID)
			}
			n.Start()
			t.Logf("round %d: restarted %s (holder: %v)", round+1, n.ID, n == h)
		}
		if round == 0 {
			h, run := c.Holder(30 * time.Second)
			k := c.KillHolder(h, run)
			next := c.nextRunAfter(k)
			checkKill(t, k, next)
			kills = append(kills, k)
			h.Start()
		}
	}
	c.Holder(30 * time.Second) // the schedule runs after the last restart
	t.Logf("deploy took %v", time.Since(start))

	runs := c.globalRuns()
	rep := check(t, c, window(start, time.Now()))
	if rep.DoubleRuns > 0 {
		t.Errorf("%d ticks ran more than once; want none", rep.DoubleRuns)
	}
	if rep.Overlaps > 0 {
		t.Errorf("%d pairs of runs overlapped under overlap = \"skip\"; want none", rep.Overlaps)
	}
	for _, k := range kills {
		for _, r := range runs {
			if r.PID != k.run.PID && r.Start.After(k.run.Start) && r.Start.Before(k.leaseEnd.Add(-50*time.Millisecond)) {
				t.Errorf("%s began a run at %s while the dead holder %s's lease lived (until %s)", r.Node,
					r.Start.UTC().Format("15:04:05.000"), k.node, k.leaseEnd.UTC().Format("15:04:05.000"))
			}
		}
	}
	fencesRise(t, runs)
	// Each graceful handover: the stopped holder's run ended (cancelled
	// after shutdown_grace) and the next run began soon after.
	for _, pid := range handovers {
		i := slices.IndexFunc(runs, func(r ledger.Run) bool { return r.PID == pid })
		if i < 0 || runs[i].Ending == "" {
			t.Errorf("the stopped holder's run (job pid %d) never ended in the ledger", pid)
			continue
		}
		prev := runs[i]
		if i+1 == len(runs) {
			t.Errorf("no run after %s's stop (its run ended %s at %s)", prev.Node, prev.Ending, prev.End.UTC().Format("15:04:05.000"))
			continue
		}
		next := runs[i+1]
		t.Logf("handover %s → %s: the stopped run ended %s, the next began %v later", prev.Node, next.Node,
			prev.Ending, next.Start.Sub(prev.End).Round(time.Millisecond))
		if d := next.Start.Sub(prev.End); d > resumeWithin {
			t.Errorf("the next run after %s's stop began %v after its run ended; want within %v", prev.Node, d, resumeWithin)
		}
	}
}
