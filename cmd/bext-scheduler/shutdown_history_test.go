package main

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
)

// TestShutdownRunsReachHistory: a run that ends during the shutdown grace
// is in the cluster's history once the node has exited, with its result:
// one that finishes within the grace (success), and one that a second
// signal cancels (cancelled). A rolling deploy stops every node while it
// runs something.
func TestShutdownRunsReachHistory(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, `
[[scheduled]]
id = "sd"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "5s"
command = ["/bin/sh", "-c", '@JOB@']
`)
			for _, x := range []struct {
				node, sleep, result string
				second              bool // a second SIGTERM ends the grace at once
			}{
				{"node-1", "1", "success", false},
				{"node-2", "30", "cancelled", true},
			} {
				c.setSleep(x.sleep)
				n := c.start(x.node, "")
				var running jobRun
				waitFor(t, x.node+" running sd", 30*time.Second, func() bool {
					for _, r := range c.jobRuns("sd") {
						if r.Node == x.node && !r.Ended {
							running = r
							return true
						}
					}
					return false
				})
				n.p.Signal(syscall.SIGTERM)
				if x.second {
					n.p.WaitLog(regexp.MustCompile(`signal received: stopping`), 10*time.Second)
					n.p.Signal(syscall.SIGTERM)
				}
				if code := n.p.Wait(30 * time.Second); code != 0 {
					t.Fatalf("%s exited %d\n%s", x.node, code, n.p.Log())
				}
				var got *cluster.Run
				for _, h := range c.history("sd") {
					if h.RunID == running.RunID {
						got = &h
					}
				}
				switch {
				case got == nil:
					t.Errorf("%s: the run %s in flight at SIGTERM (tick %s) is not in history after the node exited",
						x.node, running.RunID, running.Tick.Format(time.RFC3339))
				case got.Result != x.result || got.Node != x.node || !got.Tick.Equal(running.Tick):
					t.Errorf("%s: the run in flight at SIGTERM is in history as %+v, want result %s", x.node, *got, x.result)
				}
			}
		})
	}
}
