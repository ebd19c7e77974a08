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

// killPhase is when in the second a trial strikes: this long after the
// tick the holder just ran. A fixed phase keeps the trials comparable;
// mid-second is where a real crash lands on average.
const killPhase = 500 * time.Millisecond

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
				c := startCluster(t, b, Spec{Nodes: 3, LogLevel: "info"})
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
	since := time.Now()
	for i := range trials {
		holder, last := latestRunAfter(t, c, since)
		strike := last.Tick.Add(killPhase)
		if time.Now().After(strike) { // seen too late in its second: take the next tick
			since = time.Now()
			holder, last = latestRunAfter(t, c, since)
			strike = last.Tick.Add(killPhase)
		}
		time.Sleep(time.Until(strike)) // the fault's moment, by design
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
		since = time.Now()
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

// latestRunAfter waits for a global run that began after since and
// returns the node that ran the newest such run, and that run.
func latestRunAfter(t *testing.T, c *Cluster, since time.Time) (*Node, ledger.Run) {
	t.Helper()
	runs := c.WaitRuns("a run after the last trial", 60*time.Second, func(runs []ledger.Run) bool {
		return len(runs) > 0 && runs[len(runs)-1].Start.After(since) && runs[len(runs)-1].Begin == ledger.Accepted
	})
	last := runs[len(runs)-1]
	return c.Node(last.Node), last
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
(expected_runtime 1s, safety_margin 1s, max_clock_skew 500ms; lease 2 s on
Redis) whose 1 ms job writes a ledger. A trial waits for a tick, takes the
node that ran it as the holder, and %v after that tick sends it the signal.
**Failover time** is from the signal to the moment the first run of the
schedule on another node began (the job's own begin record in the ledger,
written when the job process starts). **Ticks missed** is how many
scheduled ticks between the holder's last run and that run no node ran.
The job lasts 1 ms, so the signal lands between two runs: the node that
ran the last tick dies or freezes with no run under way (its lock for that
tick already given back, step 7 of docs/DESIGN.md), and the figure is how
long the cluster takes to run the schedule without it. The two backends'
clusters run at the same time.
After a trial the killed node is started again (or the stopped one
continued with SIGCONT) and the next trial waits for a tick after that. Up
to %d trials per row, one cluster per backend reused across trials; a trial
with no run elsewhere within %v counts as capped, and a series whose first
%d trials are all capped stops there.

The memory backend is one node's process: it has no failover.

| backend | signal | trials | p50 | p99 | max | ticks missed p50 / max | capped at %v |
|---|---|---|---|---|---|---|---|
`, killPhase, trials, failoverCap, failoverGiveUp, failoverCap)
	for _, s := range series {
		n := len(s.times) + s.capped
		if len(s.times) == 0 {
			fmt.Fprintf(&b, "| %s | %s | %d | none | none | none | | %d |\n", backendName(s.backend), s.signal, n, s.capped)
			continue
		}
		mi := make([]time.Duration, len(s.missed))
		for i, m := range s.missed {
			mi[i] = time.Duration(m)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %d / %d | %d |\n", backendName(s.backend), s.signal, n,
			ms(percentile(s.times, 50)), ms(percentile(s.times, 99)), ms(percentile(s.times, 100)),
			int(percentile(mi, 50)), int(percentile(mi, 100)), s.capped)
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
