//go:build e2elong

package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// The long run: `make cluster-test` (go test -tags e2elong -run TestLongRun).
// BEXT_E2E_DURATION sets how long each backend runs (default 4m30s);
// BEXT_E2E_SEED replays a run's sequence of faults.

// Faults the long run injects, each followed by a recovery period.
const (
	faultNone        = "none"            // a quiet period: the baseline
	faultKill        = "kill -9"         // a node killed, started again after a while
	faultPauseHost   = "pause host"      // SIGSTOP of a node and its jobs past the lease
	faultPauseSched  = "pause sched"     // SIGSTOP of a node's scheduler only
	faultOutage      = "backend down"    // the backend stopped for everyone
	faultStall       = "stall link"      // one node's link to the backend blackholed
	faultLateReplies = "late replies"    // one node's replies delayed past its op_timeout
	faultRestart     = "restart"         // SIGTERM, start again
	faultDataLoss    = "redis data loss" // the holder's host paused mid-run, FLUSHALL, resumed before its lease ends
	longJobSleep     = 300 * time.Millisecond
	longRecovery     = 6 * time.Second // after a fault, before the next one
	defaultLongRun   = 4*time.Minute + 30*time.Second
	longFaultMin     = 3 * time.Second
	longFaultJitter  = 2 * time.Second
	longHolderChance = 0.7 // how often a node fault hits the lock holder
)

var longFaults = []string{faultNone, faultKill, faultPauseHost, faultPauseSched, faultOutage, faultStall, faultLateReplies, faultRestart}

// episode is one fault and its recovery: the ticks in [from, to).
type episode struct {
	fault    string
	node     string
	from, to time.Time
}

func TestLongRun(t *testing.T) {
	dur := defaultLongRun
	if v := os.Getenv("BEXT_E2E_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("BEXT_E2E_DURATION=%q: %v", v, err)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("BEXT_E2E_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BEXT_E2E_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d (BEXT_E2E_SEED replays it), %v per backend", seed, dur)
	for i, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			faults := longFaults
			if kind == "redis" {
				faults = append(slices.Clone(faults), faultDataLoss)
			}
			longRun(t, newBackend(t, kind), dur, faults, rand.New(rand.NewPCG(seed, uint64(i))))
		})
	}
}

func longRun(t *testing.T, b *Backend, dur time.Duration, faults []string, rng *rand.Rand) {
	c := startCluster(t, b, Spec{Nodes: 5, JobSleep: longJobSleep, ExpectedRuntime: time.Second,
		SafetyMargin: time.Second, MaxClockSkew: 500 * time.Millisecond})
	c.WaitTicks(1, 60*time.Second)
	end := time.Now().Add(dur)
	var eps []episode
	for time.Now().Before(end) {
		fault := faults[rng.IntN(len(faults))]
		ep := injectFault(t, c, fault, rng)
		// Recovery: the fault's effects (lease expiry, reconnects) settle.
		c.WaitTicks(2, 60*time.Second)
		settle := time.NewTimer(longRecovery) // letting ticks come is the point
		<-settle.C
		ep.to = time.Now().Truncate(every)
		eps = append(eps, ep)
		t.Logf("%s %s: %s..%s", ep.fault, ep.node, ep.from.Format("15:04:05"), ep.to.Format("15:04:05"))
	}
	recs := c.Records()
	t.Logf("\n%s", longTable(b.Kind, recs, eps))
	total := ledger.Check(recs, globalID, ledger.Window{From: eps[0].from.Truncate(every).Add(every),
		To: eps[len(eps)-1].to.Add(-every), Every: every})
	for _, d := range total.Doubles {
		t.Log(d)
	}
	if total.OverlapsClean > 0 {
		t.Errorf("%d overlaps got every write through", total.OverlapsClean)
	}
	if total.DoubleClean > 0 {
		t.Errorf("%d double runs got every write through", total.DoubleClean)
	}
	if lr := ledger.CheckLocal(recs, localID); lr.Doubles > 0 {
		t.Errorf("node_local: %d (node, tick) pairs ran twice", lr.Doubles)
	}
	fencesRise(t, c.globalRuns())
}

// injectFault runs one fault to its end (the node or backend is back) and
// returns its episode, from the fault's start.
func injectFault(t *testing.T, c *Cluster, fault string, rng *rand.Rand) episode {
	t.Helper()
	ep := episode{fault: fault, from: time.Now()}
	if fault == faultNone || fault == faultOutage {
		hold(rng)
		if fault == faultOutage {
			c.Backend.Stop()
			hold(rng)
			c.Backend.Start()
		}
		return ep
	}
	// A node fault: mostly the holder in the middle of a run, where it
	// matters.
	nodes := c.Nodes()
	n := nodes[rng.IntN(len(nodes))]
	if fault == faultDataLoss || rng.Float64() < longHolderChance {
		if h := c.running(5 * time.Second); h != nil {
			n = h
		} else if ended := c.ended(); len(ended) > 0 {
			n = c.Node(ended[len(ended)-1].Node)
		}
	}
	ep.node = n.ID
	ep.from = time.Now()
	switch fault {
	case faultDataLoss:
		groups := n.Pause(true)
		c.Backend.FlushAll()
		// Shorter than the lease: without the data loss no other node
		// could take the lock meanwhile.
		tm := time.NewTimer(1500 * time.Millisecond)
		<-tm.C
		n.Resume(groups)
	case faultKill:
		n.Kill()
		hold(rng)
		n.Start()
	case faultPauseHost, faultPauseSched:
		groups := n.Pause(fault == faultPauseHost)
		hold(rng)
		n.Resume(groups)
	case faultStall:
		n.Proxy.Blackhole()
		hold(rng)
		n.Proxy.Heal()
	case faultLateReplies:
		// Its requests reach the backend on time and are decided; their
		// answers come after op_timeout (Backend.Section's: 500ms on
		// Redis, 1s on Postgres), so every grant must be found by a resend.
		late := 700 * time.Millisecond
		if c.Backend.Kind == "pg" {
			late = 1400 * time.Millisecond
		}
		n.Proxy.DelayReplies(late)
		hold(rng)
		n.Proxy.DelayReplies(0)
	case faultRestart:
		n.Stop()
		hold(rng)
		n.Start()
	}
	return ep
}

// running returns the node whose global job runs now, waiting up to
// timeout for one; nil if none ran meanwhile.
func (c *Cluster) running(timeout time.Duration) *Node {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for _, r := range ledger.Runs(c.Records()) {
			if r.Schedule == globalID && r.Ending == "" && r.Begin == ledger.Accepted && time.Since(r.Start) < 2*time.Second {
				return c.Node(r.Node)
			}
		}
		<-tick.C
	}
	return nil
}

// hold keeps a fault in place for 3 to 5 seconds: past the 2s lease.
func hold(rng *rand.Rand) {
	d := longFaultMin + time.Duration(rng.Int64N(int64(longFaultJitter)))
	tm := time.NewTimer(d)
	<-tm.C
}

// longTable checks each fault's episodes and prints one row per fault.
func longTable(kind string, recs []ledger.Record, eps []episode) string {
	type row struct {
		n   int
		rep ledger.Report
	}
	rows := map[string]*row{}
	for _, ep := range eps {
		// The episode owns the ticks from the one running when its fault
		// began to the one before the next episode's.
		rep := ledger.CheckSpan(recs, globalID, ledger.Window{From: ep.from.Truncate(every),
			To: ep.to.Add(-every), Every: every})
		r := rows[ep.fault]
		if r == nil {
			r = &row{}
			rows[ep.fault] = r
		}
		r.n++
		r.rep.Ticks += rep.Ticks
		r.rep.Runs += rep.Runs
		r.rep.DoubleRuns += rep.DoubleRuns
		r.rep.DoubleClean += rep.DoubleClean
		r.rep.Missed += rep.Missed
		r.rep.Overlaps += rep.Overlaps
		r.rep.OverlapsClean += rep.OverlapsClean
		r.rep.Refused += rep.Refused
		r.rep.Cancelled += rep.Cancelled
		r.rep.Unfinished += rep.Unfinished
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| backend | fault | times | ticks | runs | double runs (uncaught) | missed ticks | overlaps (uncaught) | stale writes refused | cancelled | killed mid-run |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var sum row
	for _, f := range slices.Sorted(func(yield func(string) bool) {
		for k := range rows {
			if !yield(k) {
				return
			}
		}
	}) {
		r := rows[f]
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d (%d) | %d | %d (%d) | %d | %d | %d |\n", kind, f, r.n,
			r.rep.Ticks, r.rep.Runs, r.rep.DoubleRuns, r.rep.DoubleClean, r.rep.Missed, r.rep.Overlaps,
			r.rep.OverlapsClean, r.rep.Refused, r.rep.Cancelled, r.rep.Unfinished)
		sum.n += r.n
		sum.rep.Ticks += r.rep.Ticks
		sum.rep.Runs += r.rep.Runs
		sum.rep.DoubleRuns += r.rep.DoubleRuns
		sum.rep.DoubleClean += r.rep.DoubleClean
		sum.rep.Missed += r.rep.Missed
		sum.rep.Overlaps += r.rep.Overlaps
		sum.rep.OverlapsClean += r.rep.OverlapsClean
		sum.rep.Refused += r.rep.Refused
		sum.rep.Cancelled += r.rep.Cancelled
		sum.rep.Unfinished += r.rep.Unfinished
	}
	fmt.Fprintf(&b, "| %s | **all** | %d | %d | %d | %d (%d) | %d | %d (%d) | %d | %d | %d |\n", kind, sum.n,
		sum.rep.Ticks, sum.rep.Runs, sum.rep.DoubleRuns, sum.rep.DoubleClean, sum.rep.Missed, sum.rep.Overlaps,
		sum.rep.OverlapsClean, sum.rep.Refused, sum.rep.Cancelled, sum.rep.Unfinished)
	return b.String()
}
