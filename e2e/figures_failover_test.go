//go:build figures

package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// failoverJob is how long each run of the schedule lasts: long enough
// that a trial finds a run under way and strikes its node during it (the
// holder, its lock held and renewed), short enough to end before the next
// tick.
const failoverJob = 500 * time.Millisecond

// failoverCap bounds one trial: no run elsewhere within it is reported as
// such, not waited out.
const failoverCap = 15 * time.Second

// failoverGiveUp: a series whose first trials all reach failoverCap stops
// there (Postgres under SIGSTOP: the stopped process's session, alive in
// the kernel, keeps its advisory lock).
const failoverGiveUp = 3

type failoverSeries struct {
	backend, signal string
	trials          int
	times           []time.Duration // kill instant to the first run elsewhere
	missed          []int           // ticks no node ran between the holder's last and that run
	capped          int             // trials with no run elsewhere within failoverCap
	between         int             // trials whose holder's run had ended before the signal
	stoppedEarly    bool
}

// figuresFailover runs FIGURES_TRIALS (default 30) trials per backend and
// signal on one 3-node cluster per backend (the e2e cluster: an
// every-second require_global schedule whose job writes the ledger).
func figuresFailover(t *testing.T) string {
	trials := envInt(t, "FIGURES_TRIALS", 30)
	// The backends' clusters run at once: a trial's figure is set by the
	// lease, the handoff and the tick, not by the CPU, and one after the
	// other they would take twice the section's time.
	byKind := make([][]failoverSeries, len(backendKinds))
	t.Run("clusters", func(t *testing.T) {
		for k, kind := range backendKinds {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				b := newBackend(t, kind)
				c := startCluster(t, b, Spec{Nodes: 3, LogLevel: "info", JobSleep: failoverJob})
				for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
					s := failoverTrials(t, c, sig, trials)
					s.backend = kind
					byKind[k] = append(byKind[k], s)
					t.Logf("%s %s: %d trials, p50 %v, p99 %v, %d capped", kind, s.signal, len(s.times)+s.capped,
						percentile(s.times, 50), percentile(s.times, 99), s.capped)
				}
			})
		}
	})
	var series []failoverSeries
	for _, s := range byKind {
		series = append(series, s...)
	}
	return renderFailover(series, trials)
}

func failoverTrials(t *testing.T, c *Cluster, sig syscall.Signal, trials int) failoverSeries {
	t.Helper()
	s := failoverSeries{signal: map[syscall.Signal]string{syscall.SIGKILL: "kill -9", syscall.SIGSTOP: "SIGSTOP"}[sig], trials: trials}
	for i := range trials {
		holder, last := c.Holder(60 * time.Second) // a node whose run is under way
		var groups []int
		at := time.Now()
		if sig == syscall.SIGKILL {
			holder.Kill()
		} else {
			groups = holder.Pause(false)
		}
		run, ok := firstRunElsewhere(t, c, holder.ID, at, failoverCap)
		if sig == syscall.SIGKILL {
			holder.Start()
		} else {
			holder.Resume(groups)
		}
		if ended := endOf(c, last.PID); !ended.IsZero() && ended.Before(at) {
			s.between++
		}
		if !ok {
			s.capped++
			t.Logf("trial %d: %s of %s (ran tick %s): no run elsewhere within %v", i+1, s.signal, holder.ID,
				last.Tick.UTC().Format("15:04:05"), failoverCap)
			if s.capped == i+1 && s.capped >= failoverGiveUp {
				s.stoppedEarly = true
				break
			}
			continue
		}
		s.times = append(s.times, run.Start.Sub(at))
		s.missed = append(s.missed, int(run.Tick.Sub(last.Tick)/every)-1)
	}
	return s
}

// endOf is when the run of job pid wrote its end (zero: it never did).
func endOf(c *Cluster, pid int) time.Time {
	for _, r := range ledger.Runs(c.Records()) {
		if r.PID == pid && r.Ending != "" {
			return r.End
		}
	}
	return time.Time{}
}

// firstRunElsewhere polls the ledger for the first global run that a node
// other than holder began after at. The ledger's own begin time is the
// figure, so the polling period does not enter it.
func firstRunElsewhere(t *testing.T, c *Cluster, holder string, at time.Time, limit time.Duration) (ledger.Run, bool) {
	t.Helper()
	deadline := at.Add(limit)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, r := range ledger.Runs(c.Records()) {
			if r.Schedule == globalID && r.Node != holder && r.Start.After(at) && r.Begin == ledger.Accepted {
				return r, true
			}
		}
		if time.Now().After(deadline) {
			return ledger.Run{}, false
		}
		<-tick.C
	}
}

func renderFailover(series []failoverSeries, trials int) string {
	var b strings.Builder
	b.WriteString("## Failover\n\n")
	fmt.Fprintf(&b, `How long a require_global schedule goes unrun when the node running it dies
(`+"`kill -9`"+`) or freezes (`+"`SIGSTOP`"+`). A cluster of 3 nodes (e2e's
`+"`startCluster`"+`: each node its own process, reaching the backend through a
TCP proxy of its own) runs an every-second require_global schedule
(expected_runtime 1s, safety_margin 1s, max_clock_skew 500ms, so a 2 s
lock TTL; handoff_delay 250ms) whose job writes a ledger and lasts %v. A
trial waits until some node's run is under way (its begin in the ledger,
no end yet: e2e's `+"`Cluster.Holder`"+`) and sends that node the signal: the
node holding the lock dies or freezes during its run. **Failover time** is
from the signal to the moment the first run of the schedule on another
node began (that job's own begin record in the ledger, written as the job
process starts). **Ticks missed** is how many scheduled ticks between the
holder's tick and that run no node ran. "ended first" counts trials whose
run had ended before the signal landed (the machine was slow to show the
run); their node was then between runs, its lock given back. The two
backends' clusters run at the same time.
After a trial the killed node is started again (or the stopped one
continued with SIGCONT) and the next trial waits for a run under way. Up
to %d trials per row, one cluster per backend reused across trials; a trial
with no run elsewhere within %v counts as capped, and a series whose first
%d trials are all capped stops there.

The memory backend is one node's process: it has no failover.

| backend | signal | trials | p50 | p99 | max | ticks missed p50 / max | capped at %v | ended first |
|---|---|---|---|---|---|---|---|---|
`, failoverJob, trials, failoverCap, failoverGiveUp, failoverCap)
	for _, s := range series {
		n := len(s.times) + s.capped
		if len(s.times) == 0 {
			fmt.Fprintf(&b, "| %s | %s | %d | none | none | none | | %d | %d |\n", backendName(s.backend), s.signal, n, s.capped, s.between)
			continue
		}
		mi := make([]time.Duration, len(s.missed))
		for i, m := range s.missed {
			mi[i] = time.Duration(m)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %d / %d | %d | %d |\n", backendName(s.backend), s.signal, n,
			ms(percentile(s.times, 50)), ms(percentile(s.times, 99)), ms(percentile(s.times, 100)),
			int(percentile(mi, 50)), int(percentile(mi, 100)), s.capped, s.between)
	}
	for _, s := range series {
		if s.stoppedEarly {
			fmt.Fprintf(&b, "\n%s under %s: no other node ran the schedule within %v in any of the first %d trials. "+
				"A stopped process's TCP connection stays open (the kernel keeps it), so its Postgres session and the "+
				"session's advisory lock live on until the process is continued or killed (or TCP keepalive gives up, "+
				"hours by default): failover after a freeze waits for the freeze to end. The continued node finds its "+
				"lease deadline passed, cancels its run and releases (TestPausedHost, TestPausedHolderPastLeaseLetsTicksResume).\n",
				backendName(s.backend), s.signal, failoverCap, failoverGiveUp)
		}
	}
	b.WriteString("\n")
	return b.String()
}

func backendName(kind string) string {
	switch kind {
	case "pg":
		return "Postgres"
	case "redis":
		return "Redis"
	case "memory":
		return "memory"
	}
	return kind
}
