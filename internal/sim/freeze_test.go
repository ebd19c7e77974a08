package sim

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A frozen node's run overruns its lease and overlaps the next holder's
// only while frozen and until a step after its resume (checkLeases,
// checkOverlap); a step later it is a violation again.

// frozenRun is a clean ledger but for tick 2's run, which lasts until end
// (seconds from t0), with node-0 frozen from +5s to +12s; node-1 ran tick
// 10 from +10s on.
func frozenRun(t *testing.T, end time.Duration) *cluster {
	t.Helper()
	c := handMade(scheduler.OverlapSkip)
	c.plan.freezes = []freezeWindow{{node: "node-0", from: t0.Add(5 * time.Second), to: t0.Add(12 * time.Second)}}
	c.ran(2, end-2*time.Second, 2)
	seq := c.seq.Add(2)
	tk := t0.Add(10 * time.Second)
	c.grants.add(grant{node: "node-1", key: "s0", tick: tk, fence: 10, token: "t10", ttl: 8 * time.Second,
		at: tk, issued: seq - 1, returned: seq, delivered: true})
	c.leases.heard("t10", tk)
	c.ledger.atts = append(c.ledger.atts, &attempt{sched: "s0", tick: tk, node: "node-1", runID: "r10",
		attempt: 1, fence: 10, start: tk, end: tk.Add(time.Second)})
	c.history = append(c.history, histRec{RunRecord: scheduler.RunRecord{Schedule: "s0", Tick: tk,
		Node: "node-1", Fence: 10, RunID: "r10"}})
	return c
}

func TestCheckExcusesAFrozenRunUntilItsResume(t *testing.T) {
	c := frozenRun(t, 12500*time.Millisecond)
	for _, v := range c.check() {
		if v.inv == invLease || v.inv == invOverlap {
			t.Errorf("a run cancelled half a step after its resume: %s: %s", v.inv, v.msg)
		}
	}
}

func TestCheckFindsAFrozenRunGoingOnAfterItsResume(t *testing.T) {
	c := frozenRun(t, 15*time.Second)
	found := map[string]bool{}
	for _, v := range c.check() {
		found[v.inv] = true
	}
	if !found[invLease] || !found[invOverlap] {
		t.Fatalf("a run going on 3s after its resume: found %v, want %q and %q", found, invLease, invOverlap)
	}
}

// A job that ignores SIGTERM runs on for the kill grace after its lease
// deadline's cancel; a freeze that starts within that grace holds it back
// as one over the deadline does (seeds 367797, 232827: frozen 1.0s and
// 1.02s after the deadline, ended within the grace after the resume). A
// job that heeds SIGTERM had ended by then, and one that runs on a step
// past its resumed grace is a violation still.
func TestCheckFrozenInTheKillGrace(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ignoreTerm bool
		end        time.Duration // from t0; the lease deadline is +8s
		want       bool          // a violation of invariant 5
	}{
		{"ignores SIGTERM, ends in the grace after the resume", true, 15500 * time.Millisecond, false},
		{"ignores SIGTERM, runs on past the grace", true, 17500 * time.Millisecond, true},
		{"heeds SIGTERM, ended before the freeze", false, 15500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := handMade(scheduler.OverlapSkip)
			c.plan.scheds[0].ignoreTerm = tc.ignoreTerm
			// Tick 2's lease (heard at +2s, 6s) ends at +8s; the node
			// freezes at +9.5s, after the deadline's step, until +15s.
			c.plan.freezes = []freezeWindow{{node: "node-0", from: t0.Add(9500 * time.Millisecond), to: t0.Add(15 * time.Second)}}
			c.ran(2, tc.end-2*time.Second, 2)
			got := false
			for _, v := range c.check() {
				got = got || v.inv == invLease
			}
			if got != tc.want {
				t.Errorf("violation of %q: %v, want %v", invLease, got, tc.want)
			}
		})
	}
}
